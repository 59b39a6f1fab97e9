"""One huge input against a real server (issue 15 items 1 and 2): RSS before and after a
20 MB embeddings text, the time to refuse a 20 MB prompt, and the slowest `/healthz`
answer while each request runs.

    python benchmarks/big_inputs.py [--megabytes 20]

Starts `podserve serve` with `minilm` and `tiny-lm`; RSS from /proc. Results: stdout and
benchmarks/results/big-inputs-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness
import httpx


async def probe(client: httpx.AsyncClient, stop: asyncio.Event, worst: list[float]) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        response = await client.get("/healthz")
        assert response.status_code == 200
        worst.append(time.perf_counter() - started)
        await asyncio.sleep(0.01)


async def measure(url: str, pid: int, text: str) -> dict[str, Any]:
    report: dict[str, Any] = {}
    async with (
        httpx.AsyncClient(base_url=url, timeout=120) as client,
        httpx.AsyncClient(base_url=url, timeout=120) as prober,
    ):
        cases = [
            ("embeddings", "/v1/embeddings", {"model": "minilm", "input": text}),
            ("completion", "/v1/completions", {"model": "tiny-lm", "prompt": text}),
        ]
        for name, path, body in cases:
            rss_before = harness.rss_bytes(pid)
            stop = asyncio.Event()
            latencies: list[float] = []
            prober_task = asyncio.create_task(probe(prober, stop, latencies))
            started = time.perf_counter()
            response = await client.post(path, json=body)
            elapsed = time.perf_counter() - started
            stop.set()
            await prober_task
            report[name] = {
                "status": response.status_code,
                "seconds": round(elapsed, 3),
                "rss_before_mb": round(rss_before / 2**20, 1),
                "rss_after_mb": round(harness.rss_bytes(pid) / 2**20, 1),
                "healthz_worst_ms": round(max(latencies) * 1000, 1) if latencies else None,
                "healthz_answers": len(latencies),
            }
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=20)
    args = parser.parse_args()
    text = "word " * (args.megabytes * 1024 * 1024 // 5)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repo = harness.repository(root / "models", ("minilm", "tiny-lm"))
        replica = harness.Replica("big", repo, root).start()
        try:
            replica.wait_ready()
            report = asyncio.run(measure(replica.url, replica.pid, text))
        finally:
            replica.stop()
    report["megabytes"] = args.megabytes
    for key, value in report.items():
        print(key, value)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    harness.write_report(harness.RESULTS / f"big-inputs-{stamp}.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
