"""Where a single stream's time to first token goes through the gateway (issue 14).

    python benchmarks/gateway_ttft_steps.py [--rounds 150]

One tiny-lm pod and one gateway (SQLite store, the price table with tiny-lm's tokenizer),
one stream at a time, direct and through the gateway in turn, as the overhead phase's
rotating TTFT does (benchmarks/gateway_mixed.py). The gateway runs under
`gateway_steps_probe.py`, which stamps each step of each request; the client stamps when
it sent and when it read the first event (both CLOCK_MONOTONIC). Prints the paired TTFT
added and the median of each step.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The repository root, for tests.support (imported by benchmarks/gateway.py).
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import gateway as bench

HERE = Path(__file__).resolve().parent

BODY = json.dumps(
    {"model": "tiny-lm", "prompt": bench.PROMPT, "max_tokens": 8, "stream": True,
     "temperature": 0}
).encode()  # fmt: skip

Stamps = dict[str, float]
Step = tuple[str, Callable[[float, float, Stamps], float]]


def _between(start: str, end: str) -> Callable[[float, float, Stamps], float]:
    return lambda _sent, _first, s: s[end] - s[start]


STEPS: list[Step] = [
    ("client sent -> gateway read the bytes", lambda sent, _f, s: s["bytes in"] - sent),
    ("bytes read -> handler (HTTP parse, ASGI)", _between("bytes in", "app")),
    ("handler -> key checked", _between("app", "auth>")),
    ("key checked -> body parsed", _between("auth>", "parse>")),
    ("admission: prompt counted", _between("count<", "count>")),
    ("admission: the hold built", _between("count>", "reserve<")),
    ("admission: reserved in SQLite", _between("reserve<", "reserve>")),
    ("admitted -> upstream request sent", _between("admit>", "upstream<")),
    ("upstream request -> its headers", _between("upstream<", "upstream>")),
    ("upstream headers -> client headers", _between("upstream>", "headers out")),
    ("client headers -> first upstream event", _between("headers out", "first chunk in")),
    ("first upstream event -> relayed", _between("first chunk in", "first body out")),
    ("relayed -> the client read it", lambda _s, first, s: first - s["first body out"]),
]


async def _streams(
    direct: str, via: str, key: str, rounds: int
) -> tuple[list[float], list[tuple[float, float]]]:
    import aiohttp

    async with aiohttp.ClientSession() as http:

        async def one(url: str, headers: dict[str, str]) -> tuple[float, float]:
            sent = time.perf_counter()
            first = 0.0
            async with http.post(url + "/v1/completions", data=BODY, headers=headers) as r:
                if r.status != 200:
                    raise RuntimeError(f"{url}: HTTP {r.status}")
                async for line in r.content:
                    if not first and line.startswith(b"data: {"):
                        first = time.perf_counter()
            return sent, first

        plain = {"content-type": "application/json"}
        keyed = {**plain, "authorization": f"Bearer {key}"}
        for _ in range(5):  # warm both arms' connections
            await one(direct, plain)
            await one(via, keyed)
        direct_ttft: list[float] = []
        gateway: list[tuple[float, float]] = []
        for i in range(rounds):
            order = [(direct, plain), (via, keyed)][:: 1 if i % 2 else -1]
            for url, headers in order:
                sent, first = await one(url, headers)
                if url == direct:
                    direct_ttft.append(first - sent)
                else:
                    gateway.append((sent, first))
        return direct_ttft, gateway


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=150)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gw-steps-"))
    pod = bench.pod("steps", work, f"tiny-lm={bench.TINY}").start()
    pod.wait_ready()
    gw = bench.Gateway(
        {
            "store": {"kind": "sqlite", "path": "steps.db"},
            "pools": [{"name": "pods", "models": ["tiny-lm"], "endpoints": [pod.url]}],
            "prices": bench.PRICES,
        },
        work,
        "steps",
    )
    steps_out = work / "steps.jsonl"
    gw.start(
        entry=(sys.executable, str(HERE / "gateway_steps_probe.py")),
        env={**os.environ, "STEPS_OUT": str(steps_out)},
    )
    try:
        direct, gateway = asyncio.run(_streams(pod.url, gw.url, gw.key("--team", "b"), args.rounds))
    finally:
        gw.stop()
        pod.stop()
    stamps: list[Stamps] = [json.loads(line) for line in steps_out.read_text().splitlines()]
    stamps = stamps[-len(gateway) :]
    via = [first - sent for sent, first in gateway]
    paired = [g - d for g, d in zip(via, direct, strict=True)]
    report: dict[str, Any] = {
        "rounds": args.rounds,
        "load_average": os.getloadavg(),
        "direct_ttft_p50_ms": round(statistics.median(direct) * 1000, 3),
        "gateway_ttft_p50_ms": round(statistics.median(via) * 1000, 3),
        "paired_median_added_ms": round(statistics.median(paired) * 1000, 3),
        "steps_p50_ms": {},
    }
    for name, step in STEPS:
        values = [step(sent, first, s) for (sent, first), s in zip(gateway, stamps, strict=True)]
        report["steps_p50_ms"][name] = round(statistics.median(values) * 1000, 3)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
