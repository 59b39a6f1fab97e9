"""Added latency with the arms side by side: direct and through each proxy at once.

The overhead phase's first estimate runs each arm alone in alternating slices, and at
c=64 against a saturated pod an arm's p50 is mostly the pod's queue: by Little's law a
closed loop's latency is its concurrency over the pod's throughput, so "p50 added" there
re-measures the req/s ratio, with the drift between slices on this shared machine added
on top (the gateway and HAProxy alike moved by -2.5 to +59 ms between runs,
docs/gateway.md). Here the arms share one pod, one queue and one moment:

- `mixed_closed_loop`: the clients split evenly between the arms, all running at once
  (64 in all: the pod sees c=64). Each arm's requests wait in the same queue, so the
  difference of the p50s is what the hop itself adds to a request.
- `rotating_ttft`: one stream at a time, the arms taking turns request by request (the
  order rotating, so no arm always follows another), and the median of the paired
  differences to the direct stream sent beside it.

Neither replaces the alone-in-slices runs (req/s through the gateway is only measurable
alone); the report gives both.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

import harness

Target = tuple[str, dict[str, str] | None]


def _ms(values: list[float], q: float) -> float | None:
    return harness.percentile_ms(values, q)


async def _mixed(
    targets: dict[str, Target], path: str, body: bytes, clients: int, seconds: float
) -> dict[str, list[float]]:
    import aiohttp

    latencies: dict[str, list[float]] = {side: [] for side in targets}
    failures: dict[str, int] = dict.fromkeys(targets, 0)
    stop_at = time.monotonic() + seconds
    share = max(1, clients // len(targets))
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=share * len(targets)),
        timeout=aiohttp.ClientTimeout(total=60),
    ) as http:

        async def worker(side: str) -> None:
            url, extra = targets[side]
            headers = {"content-type": "application/json", **(extra or {})}
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                async with http.post(url + path, data=body, headers=headers) as reply:
                    await reply.read()
                    ok = reply.status == 200
                if ok:
                    latencies[side].append(time.perf_counter() - started)
                else:
                    failures[side] += 1

        await asyncio.gather(*(worker(side) for side in targets for _ in range(share)))
    if any(failures.values()):
        raise RuntimeError(f"non-200 answers in the mixed run: {failures}")
    return latencies


def mixed_closed_loop(
    targets: dict[str, Target], path: str, body: bytes, clients: int, seconds: float
) -> dict[str, Any]:
    """p50 and p99 per arm with every arm loading the pod at once, and each proxy's p50
    added over the direct arm's."""
    got = asyncio.run(_mixed(targets, path, body, clients, seconds))
    out: dict[str, Any] = {
        "clients_per_arm": max(1, clients // len(targets)),
        "seconds": seconds,
    }
    direct = _ms(got["direct"], 50) or 0.0
    for side, values in got.items():
        out[side] = {
            "requests": len(values),
            "p50_ms": _ms(values, 50),
            "p99_ms": _ms(values, 99),
        }
        if side != "direct":
            out[f"{side}_p50_added_ms"] = round((_ms(values, 50) or 0.0) - direct, 3)
    return out


async def _rotating(targets: dict[str, Target], body: bytes, rounds: int) -> dict[str, Any]:
    import aiohttp

    names = list(targets)
    ttft: dict[str, list[float]] = {side: [] for side in names}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:

        async def one(side: str) -> float:
            url, extra = targets[side]
            headers = {"content-type": "application/json", **(extra or {})}
            started = time.perf_counter()
            first: float | None = None
            async with http.post(url + "/v1/completions", data=body, headers=headers) as r:
                if r.status != 200:
                    raise RuntimeError(f"{side}: HTTP {r.status}")
                async for line in r.content:
                    if first is None and line.startswith(b"data: {"):
                        first = time.perf_counter() - started
            if first is None:
                raise RuntimeError(f"{side}: a stream without an event")
            return first

        for side in names:  # warm every arm's connections
            await one(side)
        for i in range(rounds):
            turn = i % len(names)
            for side in names[turn:] + names[:turn]:
                ttft[side].append(await one(side))
    return ttft


def rotating_ttft(targets: dict[str, Target], rounds: int = 150) -> dict[str, Any]:
    """One stream at a time, the arms in turn: TTFT p50 per arm, and per proxy the median
    of its TTFT minus the direct stream's of the same round."""
    body = json.dumps(
        {"model": "tiny-lm", "prompt": "The function returns", "max_tokens": 8,
         "stream": True, "temperature": 0}
    ).encode()  # fmt: skip
    got = asyncio.run(_rotating(targets, body, rounds))
    direct = got["direct"]
    out: dict[str, Any] = {"rounds": rounds, "direct_p50_ms": _ms(direct, 50)}
    for side, values in got.items():
        if side == "direct":
            continue
        paired = [a - b for a, b in zip(values, direct, strict=True)]
        out[f"{side}_p50_ms"] = _ms(values, 50)
        out[f"{side}_added_p50_ms"] = round((_ms(values, 50) or 0.0) - (_ms(direct, 50) or 0.0), 3)
        out[f"{side}_paired_median_added_ms"] = round(statistics.median(paired) * 1000, 3)
    return out
