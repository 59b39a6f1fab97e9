"""Huge prompts through the gateway: the slowest `/healthz` answer while each request runs,
and the request's own time (the gateway counts prompt tokens with the model's tokenizer
before it reserves budget; see src/podserve/gateway/counting.py).

    python benchmarks/gateway_big_inputs.py [--megabytes 1,3,15] [--src OTHER_TREE/src]

Starts `podserve serve` with tiny-lm and a `podserve gateway` (SQLite store, tiny-lm priced
with its tokenizer), sends one completion per size with a probe polling the gateway's
`/healthz` every 10 ms, then one 60-input embeddings request (a ~450 KB response whose
usage the gateway reads). `--src` runs the gateway from another tree (e.g. a `git
archive` of an older commit) for a before/after in one run.
Results: stdout and benchmarks/results/gateway-big-inputs-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness
from gateway import TINY, Gateway, pod


async def _probe(client: httpx.AsyncClient, stop: asyncio.Event, worst: list[float]) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        with contextlib.suppress(httpx.HTTPError):  # past its timeout: still the worst
            await client.get("/healthz")
        worst.append(time.perf_counter() - started)
        await asyncio.sleep(0.01)


async def _one(url: str, key: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {key}"}
    async with (
        httpx.AsyncClient(base_url=url, timeout=120) as client,
        httpx.AsyncClient(base_url=url, timeout=30) as probes,
    ):
        stop, worst = asyncio.Event(), [0.0]
        probing = asyncio.create_task(_probe(probes, stop, worst))
        await asyncio.sleep(0.2)
        started = time.perf_counter()
        response = await client.post(path, json=body, headers=headers)
        took = time.perf_counter() - started
        await asyncio.sleep(0.1)
        stop.set()
        await probing
    return {
        "status": response.status_code,
        "request_s": round(took, 3),
        "worst_healthz_ms": round(max(worst) * 1000, 1),
        "probes": len(worst) - 1,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", default="1,3,15")
    parser.add_argument("--src", help="run the gateway from this tree's src/")
    args = parser.parse_args()
    if args.src:
        os.environ["PYTHONPATH"] = str(Path(args.src).resolve())
    report: dict[str, Any] = {"src": args.src or "this tree", "load_at_start": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        served = pod("big", work, f"tiny-lm={TINY}", f"minilm={harness.MODELS / 'minilm'}")
        p = served.start()
        p.wait_ready()
        gw = Gateway(
            {
                "store": {"kind": "sqlite", "path": "big.db"},
                "pools": [{"name": "pods", "models": ["tiny-lm", "minilm"], "endpoints": [p.url]}],
                "prices": {
                    "tiny-lm": {
                        "inputPerMillionUsd": 1.0,
                        "outputPerMillionUsd": 2.0,
                        "tokenizer": str(TINY / "tokenizer.json"),
                    }
                },
            },
            work,
            "big",
        ).start()
        try:
            key = gw.key("--team", "bench")
            for mb in (float(m) for m in args.megabytes.split(",")):
                prompt = "hello world " * int(mb * 1_000_000 / 12)
                body = {"model": "tiny-lm", "prompt": prompt, "max_tokens": 2}
                result = asyncio.run(_one(gw.url, key, "/v1/completions", body))
                report[f"prompt_{mb:g}MB"] = result
                print(f"prompt {mb:g} MB: {result}", flush=True)
            inputs = [f"sentence number {i} about a function" for i in range(60)]
            body = {"model": "minilm", "input": inputs}
            result = asyncio.run(_one(gw.url, key, "/v1/embeddings", body))
            report["embeddings_60"] = result
            print(f"embeddings, 60 inputs: {result}", flush=True)
        finally:
            gw.stop()
            p.stop()
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H-%M-%SZ")
    out = harness.RESULTS / f"gateway-big-inputs-{stamp}.json"
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
