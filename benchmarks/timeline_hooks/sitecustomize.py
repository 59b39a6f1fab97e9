"""Loaded into `podserve serve` by benchmarks/timeline.py (this directory goes first on the
server's PYTHONPATH, so Python's `site` imports it at start-up). It wraps three places with
`time.perf_counter()` stamps, without changing what they do, to split one request's
server time at concurrency 1 into phases:

- `in_to_submit`: the request's bytes reach uvicorn's protocol -> its model call is handed
  to a worker thread (HTTP parse, routing, OIP decode, admission, batching);
- `wake`: handed over -> the worker thread starts it;
- `job`: the worker thread's whole call (preprocess, predict, postprocess);
- `back`: the call ends -> its completion runs on the event loop;
- `done_to_out`: completion on the loop -> the last response body handed to the transport;
- `total`: the first to the last of these.

Benchmark-only: at concurrency 1 the module-level `_state` holds one request at a time.
Medians in ms go to the file named by TIMELINE_OUT every 250 requests.
"""

from __future__ import annotations

import builtins
import json
import os
import statistics
import time
from typing import Any

_records: dict[str, list[float]] = {
    k: [] for k in ("in_to_submit", "wake", "job", "back", "done_to_out", "total")
}
_state: dict[str, float] = {}
_clock = time.perf_counter


def _dump() -> None:
    medians = {k: round(statistics.median(v) * 1e3, 4) for k, v in _records.items() if v}
    medians["requests"] = len(_records["total"])
    with open(os.environ["TIMELINE_OUT"], "w") as out:
        json.dump(medians, out)


def _install() -> None:
    from uvicorn.protocols.http import httptools_impl

    from podserve.engine import threads

    submit = threads.WorkerThreads.submit

    def timed_submit(self: Any, job: Any, done: Any) -> None:
        handed = _clock()
        if "in" in _state:
            _records["in_to_submit"].append(handed - _state["in"])
        ended: dict[str, float] = {}

        def timed_job() -> Any:
            started = _clock()
            result = job()
            ended["at"] = _clock()
            _records["wake"].append(started - handed)
            _records["job"].append(ended["at"] - started)
            return result

        def timed_done(result: Any, error: BaseException | None) -> None:
            now = _clock()
            _records["back"].append(now - ended.get("at", now))
            _state["done"] = now
            done(result, error)

        submit(self, timed_job, timed_done)

    threads.WorkerThreads.submit = timed_submit  # type: ignore[method-assign]

    received = httptools_impl.HttpToolsProtocol.data_received

    def timed_received(self: Any, data: bytes) -> None:
        _state["in"] = _clock()
        received(self, data)

    httptools_impl.HttpToolsProtocol.data_received = timed_received  # type: ignore[method-assign]

    send = httptools_impl.RequestResponseCycle.send

    async def timed_send(self: Any, message: Any) -> None:
        await send(self, message)
        if message.get("type") == "http.response.body" and not message.get("more_body"):
            now = _clock()
            if "done" in _state:
                _records["done_to_out"].append(now - _state.pop("done"))
            if "in" in _state:
                _records["total"].append(now - _state.pop("in"))
                if len(_records["total"]) % 250 == 0:
                    _dump()

    httptools_impl.RequestResponseCycle.send = timed_send  # type: ignore[method-assign]


if os.environ.get("TIMELINE_OUT"):
    # podserve is not importable yet when `site` runs: install on its server's first import
    _import = builtins.__import__

    def _hooked_import(name: str, *args: Any, **kwargs: Any) -> Any:
        module = _import(name, *args, **kwargs)
        if name.startswith("podserve.server"):
            builtins.__import__ = _import
            _install()
        return module

    builtins.__import__ = _hooked_import
