"""`podserve gateway` with step stamps, for benchmarks/gateway_ttft_steps.py.

Run as `python gateway_steps_probe.py gateway --config ...` (the CLI's arguments). It wraps
the gateway's steps with `time.perf_counter()` stamps (CLOCK_MONOTONIC, the same clock in
the client's process), without changing what they do, and appends one JSON line per
request to the file STEPS_OUT names. Benchmark-only: one request at a time (`_now` is
module state).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

import podserve.gateway.app as app_module
from podserve.cli.main import main
from podserve.gateway import asgi
from podserve.gateway.accounting import Accounting
from podserve.gateway.body_parse import BodyParser
from podserve.gateway.counting import PromptCounting
from podserve.gateway.store.sqlite import SqliteStore
from podserve.gateway.upstream_http import UpstreamClient, UpstreamResponse

clock = time.perf_counter
_now: dict[str, float] = {}


def _timed(owner: type, name: str, label: str) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    async def stamped(*args: Any, **kwargs: Any) -> Any:
        _now[label + "<"] = clock()
        try:
            return await original(*args, **kwargs)
        finally:
            _now[label + ">"] = clock()

    setattr(owner, name, stamped)


_timed(Accounting, "authenticate", "auth")
_timed(Accounting, "admit", "admit")
_timed(PromptCounting, "prompt_tokens", "count")
_timed(SqliteStore, "reserve", "reserve")
_timed(BodyParser, "parse", "parse")
_timed(BodyParser, "run", "encode")
_timed(UpstreamClient, "request", "upstream")

_received = HttpToolsProtocol.data_received


def _data_received(self: HttpToolsProtocol, data: bytes) -> None:
    _now["bytes in"] = clock()
    _received(self, data)


HttpToolsProtocol.data_received = _data_received  # type: ignore[method-assign]

_http = asgi.App._http


async def _app_http(self: asgi.App, scope: Any, receive: Any, send: Any) -> None:
    arrived = _now.get("bytes in", 0.0)
    _now.clear()
    _now["bytes in"] = arrived
    _now["app"] = clock()

    async def stamped_send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            _now["headers out"] = clock()
        elif message.get("body") and "first body out" not in _now:
            _now["first body out"] = clock()
            await send(message)
            # Written now, not when the handler returns: a stream's handler is still
            # settling when its client has sent the next request, which clears `_now`.
            _write(dict(_now))
            return
        await send(message)

    await _http(self, scope, receive, stamped_send)


def _write(stamps: dict[str, float]) -> None:
    with open(os.environ["STEPS_OUT"], "a") as out:
        out.write(json.dumps(stamps) + "\n")


asgi.App._http = _app_http  # type: ignore[method-assign]

_chunks = UpstreamResponse.chunks


async def _stamped_chunks(self: UpstreamResponse) -> AsyncIterator[bytes]:
    async for chunk in _chunks(self):
        _now.setdefault("first chunk in", clock())
        yield chunk


UpstreamResponse.chunks = _stamped_chunks  # type: ignore[method-assign]
_relay = app_module.relay_stream


async def _stamped_relay(*args: Any, **kwargs: Any) -> None:
    _now["relay"] = clock()
    await _relay(*args, **kwargs)


app_module.relay_stream = _stamped_relay  # type: ignore[assignment]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
