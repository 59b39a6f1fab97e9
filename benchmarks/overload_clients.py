"""The overload benchmark's load generator (benchmarks/overload.py): closed-loop clients in
a process of their own, started at a lower CPU priority (`nice`), so that on a machine the
clients share with the pod they take only CPU the pod leaves (on a cluster they run on
other machines). Each client sends its next request as soon as the last one is answered;
after a 503 it waits a random time up to Retry-After when told to back off (full jitter).

Two clients: podserve bench's raw-asyncio one (`lean`: the request encoded once, only the
status line and framing headers parsed; 0.02-0.05 ms of CPU an attempt) and httpx
(1.9-3.3 ms an attempt, measured; kept to reproduce the issue's setup).
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness

from podserve.bench.client import ConnectionClosed, HttpConnection, RequestTimeout
from podserve.bench.client import run as run_loop
from podserve.bench.wire import ResponseParser, encode_request

ROWS = 64


def body() -> bytes:
    data = np.random.default_rng(0).standard_normal((ROWS, 256)).astype(np.float32)
    return orjson.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": [ROWS, 256],
                    "datatype": "FP32",
                    "data": data.reshape(-1).tolist(),
                }
            ]
        }
    )


async def client_loop(
    client: httpx.AsyncClient,
    url: str,
    payload: bytes,
    tally: harness.Tally,
    rejections_s: list[float],
    stop: asyncio.Event,
    *,
    backoff: bool,
    max_backoff_s: float,
) -> None:
    headers = {"content-type": "application/json"}
    while not stop.is_set():
        start = time.monotonic()
        try:
            response = await client.post(url, content=payload, headers=headers)
        except httpx.HTTPError as exc:
            tally.record(f"error:{type(exc).__name__}")
            continue
        elapsed_s = time.monotonic() - start
        if response.status_code == 200:
            tally.record("ok", elapsed_s)
            continue
        await _refused(
            response.status_code,
            response.headers.get("retry-after", "1"),
            elapsed_s,
            tally,
            rejections_s,
            max_backoff_s if backoff else None,
        )


async def _refused(
    status: int,
    retry_after: str,
    elapsed_s: float,
    tally: harness.Tally,
    rejections_s: list[float],
    max_backoff_s: float | None,
) -> None:
    """Record a non-200 answer; after a 503, back off (when `max_backoff_s` is given) for a
    full-jitter share of its Retry-After, capped."""
    tally.record(str(status))
    if status != 503:
        return
    rejections_s.append(elapsed_s)
    if max_backoff_s is None:
        return
    try:
        wait_s = min(float(retry_after), max_backoff_s)
    except ValueError:
        wait_s = 1.0
    await asyncio.sleep(random.uniform(0, wait_s))  # full jitter


class _Connection(HttpConnection):
    """podserve bench's lean keep-alive connection, keeping each answer's Retry-After."""

    retry_after = "1"

    def _finish(self, parser: ResponseParser) -> None:
        self.retry_after = parser.headers.get("retry-after", "1")
        super()._finish(parser)


async def lean_loop(
    host: str,
    port: int,
    raw: bytes,
    tally: harness.Tally,
    rejections_s: list[float],
    stop: asyncio.Event,
    *,
    backoff: bool,
    max_backoff_s: float,
) -> None:
    """`client_loop` on podserve bench's raw-asyncio client: the request is encoded once,
    only the status line and framing headers are parsed (docs/benchmarks.md, Method)."""
    loop = asyncio.get_running_loop()
    connection: _Connection | None = None
    while not stop.is_set():
        if connection is None or connection.closed:
            _, connection = await loop.create_connection(_Connection, host, port)
        start = time.monotonic()
        try:
            response = await connection.request(raw, timeout_s=60)
        except (ConnectionClosed, RequestTimeout, OSError) as exc:
            tally.record(f"error:{type(exc).__name__}")
            connection = None
            continue
        elapsed_s = time.monotonic() - start
        if response.status == 200:
            tally.record("ok", elapsed_s)
            continue
        await _refused(
            response.status,
            connection.retry_after,
            elapsed_s,
            tally,
            rejections_s,
            max_backoff_s if backoff else None,
        )
    if connection is not None:
        connection.close()


async def generate_load(spec: dict[str, Any], conn: Connection) -> dict[str, Any]:
    tally = harness.Tally()
    rejections_s: list[float] = []
    stop = asyncio.Event()
    clients = spec["clients"]
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    payload = body()
    url = httpx.URL(spec["url"])
    raw = encode_request("POST", f"{url.host}:{url.port}", url.path, payload)
    options = {"backoff": spec["backoff"], "max_backoff_s": spec["max_backoff_s"]}
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        if spec["client"] == "httpx":
            loops = [
                client_loop(client, spec["url"], payload, tally, rejections_s, stop, **options)
                for _ in range(clients)
            ]
        else:
            loops = [
                lean_loop(url.host, url.port or 80, raw, tally, rejections_s, stop, **options)
                for _ in range(clients)
            ]
        tasks = [asyncio.create_task(one) for one in loops]
        cpu_start = time.process_time()
        conn.send("started")
        await asyncio.to_thread(conn.recv)  # the orchestrator's "stop"
        cpu_s_used = time.process_time() - cpu_start
        stop.set()
        await asyncio.gather(*tasks)
    return {
        "outcomes": dict(tally.outcomes),
        "ok_latencies_s": tally.latencies_s,
        "rejections_s": rejections_s,
        "cpu_s": cpu_s_used,
    }


def load_process(spec: dict[str, Any], conn: Connection) -> None:
    """Entry point of the load generator's process."""
    os.nice(spec["nice"])
    conn.send(run_loop(generate_load(spec, conn)))
    conn.close()
