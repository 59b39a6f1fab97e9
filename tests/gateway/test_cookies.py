"""The gateway keeps no cookies: one tenant's upstream cookie never rides another tenant's
request. Hosted APIs set cookies on API responses (OpenAI's, behind Cloudflare, sends
`__cf_bm`); aiohttp's default session jar would store them and attach them to every later
request to that host, whichever key made it.

The hosted provider here is a real HTTP server on loopback (aiohttp.web, in a thread of
this process) that sets a cookie per caller and records the Cookie header it receives."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.gateway.support import GatewayProcess, make_key


class _Hosted:
    """A minimal OpenAI-compatible completions endpoint that sets a cookie naming the
    caller's request and records the cookies each request carried."""

    def __init__(self) -> None:
        self.cookies_seen: list[str | None] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    async def _completions(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        self.cookies_seen.append(request.headers.get("Cookie"))
        reply = web.json_response(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "model": body["model"],
                "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )
        reply.set_cookie("__cf_bm", f"session-of-{body['prompt']}", path="/")
        return reply

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = runner.addresses[0][1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())
        self._loop.close()

    def __enter__(self) -> _Hosted:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the hosted stand-in did not start")
        return self

    def __exit__(self, *_: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def hosted() -> Iterator[_Hosted]:
    with _Hosted() as server:
        yield server


def test_an_upstream_cookie_is_not_sent_with_other_requests(
    hosted: _Hosted, tmp_path: Path
) -> None:
    config = {
        "store": {"kind": "sqlite", "path": "gateway.db"},
        "fallbacks": [
            {"name": "hosted", "baseUrl": f"http://localhost:{hosted.port}/v1", "models": ["m"]}
        ],
        "prices": {"m": {"inputPerMillionUsd": 1.0, "outputPerMillionUsd": 2.0}},
    }
    with GatewayProcess(config, tmp_path) as gateway:
        alice, _ = make_key(gateway.config_path, team="alice")
        bob, _ = make_key(gateway.config_path, team="bob")
        with httpx.Client(base_url=gateway.url, timeout=30) as client:
            for key, prompt in ((alice, "alice"), (bob, "bob"), (alice, "alice-again")):
                reply = client.post(
                    "/v1/completions",
                    json={"model": "m", "prompt": prompt, "max_tokens": 1},
                    headers={"authorization": f"Bearer {key}"},
                )
                assert reply.status_code == 200, reply.text
    assert hosted.cookies_seen == [None, None, None]
