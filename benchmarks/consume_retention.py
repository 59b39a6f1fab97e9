"""What deleting acknowledged request entries costs and saves (issue 18).

Runs a private redis-server, then for each mode (keep, delete) pushes the same entries
through `RedisStreams` exactly as the consumer does (XREADGROUP, then one write-script
call per flush of `--flush` results) and reports, per mode, Redis' own CPU per entry for
the write script (`INFO commandstats`, cmdstat_evalsha), the request stream's length and
size and Redis' `used_memory` growth at the end, and the group's lag. No model runs: this isolates
the script. Ratios (delete / keep) are within one run. `used_memory` growth includes the
results stream and its markers, the same in both modes; `request_stream_bytes` (MEMORY
USAGE, every node counted) is the request stream alone.

    .venv/bin/python benchmarks/consume_retention.py [--entries 20000] [--flush 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

# The repository root, for tests.support: the Redis starter the tests and
# benchmarks/consume.py use.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from podserve.consume.contract import Result
from podserve.consume.retention import Retention
from podserve.consume.streams import RedisStreams, StreamNames, Write
from tests.support.redis import NOT_INSTALLED, redis_installed, redis_server


async def _script_usec(client: aioredis.Redis) -> tuple[float, int]:
    stats: dict[str, Any] = await client.info("commandstats")
    row = stats.get("cmdstat_evalsha", {"usec": 0, "calls": 0})
    return float(row["usec"]), int(row["calls"])


async def _run_mode(client: aioredis.Redis, mode: str, entries: int, flush: int) -> dict[str, Any]:
    names = StreamNames(
        requests=f"bench-{mode}",
        group="g",
        results=f"bench-{mode}-results",
        dead_letters=f"bench-{mode}-dead",
        consumer="c",
        retention=Retention(delete_acknowledged=mode == "delete"),
    )
    streams = RedisStreams(client, names)
    await streams.ensure_group()
    body = b'{"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}'
    memory_before = int((await client.info("memory"))["used_memory"])
    usec_before, calls_before = await _script_usec(client)
    done = 0
    while done < entries:
        pipe = client.pipeline(transaction=False)
        for i in range(done, min(done + 500, entries)):
            pipe.xadd(names.requests, {"id": f"r{i}", "model": "m", "body": body})
        await pipe.execute()
        while True:
            read = await streams.read_new(flush, None)
            if not read:
                break
            await streams.apply([Write(e, Result(e.request_id, 200, b"{}")) for e in read])
            done += len(read)
    usec_after, calls_after = await _script_usec(client)
    memory_after = int((await client.info("memory"))["used_memory"])
    state = await streams.group_state()
    return {
        "mode": mode,
        "entries": entries,
        "script_calls": calls_after - calls_before,
        "script_usec_per_entry": round((usec_after - usec_before) / entries, 2),
        "request_stream_length": await client.xlen(names.requests),
        "request_stream_bytes": await client.memory_usage(names.requests, samples=0),
        "used_memory_growth_bytes": memory_after - memory_before,
        "lag": None if state is None else state.lag,
    }


async def _main(entries: int, flush: int, url: str) -> dict[str, Any]:
    client = aioredis.Redis.from_url(url)
    try:
        runs = [await _run_mode(client, mode, entries, flush) for mode in ("keep", "delete")]
    finally:
        await client.aclose()
    keep, delete = runs
    return {
        "runs": runs,
        "script_cpu_ratio_delete_over_keep": round(
            delete["script_usec_per_entry"] / keep["script_usec_per_entry"], 2
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--flush", type=int, default=10, help="results per script call")
    args = parser.parse_args()
    if not redis_installed():
        raise SystemExit(f"{NOT_INSTALLED}: apt-get install redis-server")
    # the same redis-server the consume benchmark and the tests start (free port, no
    # persistence)
    with redis_server() as server:
        print(json.dumps(asyncio.run(_main(args.entries, args.flush, server.url)), indent=2))


if __name__ == "__main__":
    main()
