"""The gateway's upstream client alone: CPU per request, aiohttp against `upstream_http`.

    python benchmarks/gateway_client.py [--seconds 4] [--rounds 3] [--clients 64]

A raw httptools server (the cheapest HTTP/1.1 server this machine runs, so the client is
the bottleneck) in its own process on CPU 0; the client in this process, on CPU 1, with
uvloop as the gateway runs it: `--clients` closed-loop workers, each sending a W1-sized
OIP request and reading the whole response, then a streamed response of 64 chunked SSE
events. The two clients alternate in every round (the machine is shared and its load
drifts). Reported: this process's CPU µs per request (`time.process_time`) and req/s,
and aiohttp ÷ upstream_http. The aiohttp client is configured as the gateway's was
(no pool limit, no cookie jar, parsed URL, sock_read timeout).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import uvloop
from yarl import URL

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

from podserve.gateway.upstream_http import UpstreamClient, parse_url

REQUEST = harness.iris_body(1)
PATH = "/v2/models/iris/infer"
_SERVER = r"""
import asyncio, os, sys, httptools, uvloop
body = (b'{"model_name":"iris","outputs":[{"name":"label","datatype":"INT64",'
        b'"shape":[1],"data":[0]}]}')
plain = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
         b"content-length: %d\r\n\r\n%s" % (len(body), body))
event = b'data: {"choices":[{"text":"tok"}]}\n\n'
chunk = b"%x\r\n%s\r\n" % (len(event), event)
stream = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
          b"transfer-encoding: chunked\r\n\r\n" + chunk * 64 + b"0\r\n\r\n")
class P(asyncio.Protocol):
    def connection_made(self, t):
        self.t, self.p, self.url = t, httptools.HttpRequestParser(self), b""
    def data_received(self, d): self.p.feed_data(d)
    def on_url(self, u): self.url = u
    def on_message_complete(self): self.t.write(stream if self.url == b"/stream" else plain)
async def main():
    server = await asyncio.get_running_loop().create_server(P, "127.0.0.1", int(sys.argv[1]))
    print("ready", flush=True)
    await server.serve_forever()
os.sched_setaffinity(0, {0})
uvloop.run(main())
"""

Send = Callable[[], Awaitable[int]]


async def closed_loop(send: Send, clients: int, seconds: float) -> dict[str, float]:
    done = 0
    stop = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal done
        while time.monotonic() < stop:
            await send()
            done += 1

    cpu0, wall0 = time.process_time(), time.monotonic()
    await asyncio.gather(*(worker() for _ in range(clients)))
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    return {"cpu_us_per_request": cpu / done * 1e6, "rps": done / wall}


Close = Callable[[], Awaitable[None]]
_HEADERS = [(b"content-type", b"application/json"), (b"x-request-id", b"0123456789abcdef")]


def _aiohttp(base: str) -> tuple[Callable[[str], Send], Close]:
    """aiohttp configured as the gateway's was: no pool limit, no cookie jar, parsed URLs,
    a sock_read timeout."""
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=60),
        cookie_jar=aiohttp.DummyCookieJar(),
    )
    urls = {"oip": URL(base + PATH), "stream": URL(base + "/stream")}
    headers = {k.decode(): v.decode() for k, v in _HEADERS}

    def sender(name: str) -> Send:
        async def send() -> int:
            response = await session.request("POST", urls[name], data=REQUEST, headers=headers)
            size = sum([len(chunk) async for chunk in response.content.iter_any()])
            response.release()
            return size

        return send

    return sender, session.close


def _upstream_http(base: str) -> tuple[Callable[[str], Send], Close]:
    client = UpstreamClient(5, 60)
    urls = {"oip": parse_url(base + PATH), "stream": parse_url(base + "/stream")}

    def sender(name: str) -> Send:
        async def send() -> int:
            response = await client.request(b"POST", urls[name], REQUEST, _HEADERS)
            size = sum([len(chunk) async for chunk in response.chunks()])
            response.release()
            return size

        return send

    return sender, client.close


async def measure(kind: str, port: int, clients: int, seconds: float) -> dict[str, Any]:
    build = _aiohttp if kind == "aiohttp" else _upstream_http
    sender, close = build(f"http://127.0.0.1:{port}")
    result: dict[str, Any] = {}
    try:
        for name in ("oip", "stream"):
            await closed_loop(sender(name), clients, 0.5)  # warm the pool
            result[name] = await closed_loop(sender(name), clients, seconds)
    finally:
        await close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=64)
    args = parser.parse_args()
    port = harness.free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    assert server.stdout.readline().strip() == "ready"
    os.sched_setaffinity(0, {1})
    runs: dict[str, list[dict[str, Any]]] = {"aiohttp": [], "upstream_http": []}
    try:
        for i in range(args.rounds):
            order = ("aiohttp", "upstream_http") if i % 2 == 0 else ("upstream_http", "aiohttp")
            for kind in order:
                runs[kind].append(uvloop.run(measure(kind, port, args.clients, args.seconds)))
    finally:
        server.terminate()
        server.wait()
    report: dict[str, Any] = {
        "started": dt.datetime.now(dt.UTC).isoformat(),
        "clients": args.clients,
        "rounds": runs,
    }
    for name in ("oip", "stream"):
        med = {
            kind: {
                key: round(statistics.median(r[name][key] for r in rs), 1)
                for key in ("cpu_us_per_request", "rps")
            }
            for kind, rs in runs.items()
        }
        med["cpu_ratio_aiohttp_over_upstream_http"] = round(
            med["aiohttp"]["cpu_us_per_request"] / med["upstream_http"]["cpu_us_per_request"], 2
        )
        report[name] = med
        print(json.dumps({name: med}), flush=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    harness.write_report(harness.RESULTS / f"gateway-client-{stamp}.json", report)
    print(f"wrote benchmarks/results/gateway-client-{stamp}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
