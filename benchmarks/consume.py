"""`podserve consume` against `podserve serve` on the same models at the same concurrency,
and the kill -9 exactly-once run.

    .venv/bin/python benchmarks/consume.py [--seconds 8] [--rounds 4] [--concurrency 32] [--pin]

Each side is a closed loop of `--concurrency` outstanding requests: HTTP clients (podserve's
lean HTTP/1.1 client) each POST and wait for the answer; stream producers each XADD an
entry and wait for its result on the results stream (one reader dispatches results by id).
The producers come twice: with redis-py, as the producer example in docs/async.md, and as
lean as the HTTP client (raw RESP on a connection each, replies parsed by hiredis), so the
comparison does not charge the queue for redis-py's per-command Python. The sides run
interleaved, `--rounds` short segments each, against the same models, data plane and
machine; the report gives the median per-round ratio of entries/s to requests/s per model
(target: not below 1) and the CPU milliseconds each request cost in every process of its
side (server + client; consumer + redis + producer), the CPU capacity ratios those imply
(requests per CPU-second, HTTP's cost over consume's: with Redis, without Redis, and the
pod's process alone), and Redis' own time per entry by command (INFO commandstats).
`--pin` puts redis-server on CPU 1 and everything else (server, consumer, clients and
producers) on CPU 0: Redis on a core of its own, as on a cluster where it runs on another
node, and both sides sharing the same one core otherwise. It also times one consumer draining
a 10,000-entry backlog queued before it starts (what a consumer woken from zero by KEDA
does), against the HTTP rate.

Then two consumers share one group; 2,000 entries are queued; one consumer is killed with
SIGKILL once a quarter are answered. The run passes when every request id has exactly one
result (none lost, none duplicated); it reports how long the survivor took to claim the
dead consumer's pending entries and finish.

Needs redis-server (Debian package) and the dev extras. Writes
benchmarks/results/consume-<UTC time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import hiredis
import httpx
import orjson
import redis
import redis.asyncio as aioredis

# The repository root, for tests.support: the tests' Redis starter, so both run the same
# server (a free loopback port, no persistence).
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from tests.support.ports import free_port
from tests.support.redis import NOT_INSTALLED, redis_installed, redis_server

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "examples" / "models"
PODSERVE = str(Path(sys.executable).parent / "podserve")

BODIES: dict[str, bytes] = {
    "iris": orjson.dumps(
        {
            "inputs": [
                {
                    "name": "features",
                    "shape": [1, 4],
                    "datatype": "FP32",
                    "data": [5.1, 3.5, 1.4, 0.2],
                }
            ]
        }
    ),
    "wide-mlp": orjson.dumps(
        {"inputs": [{"name": "input", "shape": [1, 256], "datatype": "FP32", "data": [0.5] * 256}]}
    ),
}


# --pin: the CPUs redis-server and everything else may run on (None: any).
REDIS_CPUS: set[int] | None = None
OTHER_CPUS: set[int] | None = None


def _pin(cpus: set[int] | None) -> None:
    """Runs in the child before exec, so every thread it starts inherits the mask."""
    if cpus is not None:
        os.sched_setaffinity(0, cpus)


def wait_for(condition: Any, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def repository(root: Path, model: str) -> Path:
    repo = root / f"repo-{model}"
    repo.mkdir(parents=True, exist_ok=True)
    if not (repo / model).exists():
        shutil.copytree(MODELS / model, repo / model)
    return repo


@contextlib.contextmanager
def serve(repo: Path, log: Path) -> Iterator[tuple[str, int]]:
    port = free_port()
    cmd = [
        PODSERVE,
        "serve",
        "--model-repository",
        str(repo),
        "--port",
        str(port),
        "--grpc-port",
        "-1",
        "--access-log-sample-rate",
        "0",
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=lambda: _pin(OTHER_CPUS)
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: _ready(url), "podserve serve /ready")
            yield url, proc.pid
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def consume(
    redis_url: str, repo: Path, names: dict[str, str], log: Path, *extra: str
) -> Iterator[subprocess.Popen[bytes]]:
    cmd = [
        PODSERVE,
        "consume",
        "--redis",
        redis_url,
        "--stream",
        names["stream"],
        "--group",
        "bench",
        "--results-stream",
        names["results"],
        "--model-repository",
        str(repo),
        "--metrics-port",
        "0",
        "--metrics-host",
        "127.0.0.1",
        *extra,
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=lambda: _pin(OTHER_CPUS)
        )
        try:
            wait_for(
                lambda: b'"consuming"' in log.read_bytes() or proc.poll() is not None, "consumer"
            )
            if proc.poll() is not None:
                raise RuntimeError(f"consumer exited: {log.read_text()[-2000:]}")
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)


async def http_rate(url: str, model: str, concurrency: int, seconds: float) -> dict[str, Any]:
    """Closed loop over podserve's own lean HTTP/1.1 client (podserve.bench.client), so the
    load generator's CPU goes to the server, not to httpx."""
    from podserve.bench.client import open_connection

    body = BODIES[model]
    host, port = url.removeprefix("http://").split(":")
    raw = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    done = 0
    errors = 0
    stop = time.monotonic() + seconds

    async def client_loop() -> None:
        nonlocal done, errors
        connection = await open_connection(host, int(port))
        try:
            while time.monotonic() < stop:
                response = await connection.request(raw, timeout_s=60)
                if response.status == 200:
                    done += 1
                else:
                    errors += 1
        finally:
            connection.close()

    start = time.monotonic()
    await asyncio.gather(*(client_loop() for _ in range(concurrency)))
    elapsed = time.monotonic() - start
    return {"completed": done, "errors": errors, "per_s": done / elapsed}


async def stream_rate(
    redis_url: str, names: dict[str, str], model: str, concurrency: int, seconds: float
) -> dict[str, Any]:
    client = aioredis.Redis.from_url(redis_url)
    reader = aioredis.Redis.from_url(redis_url)
    body = BODIES[model]
    waiting: dict[str, asyncio.Future[bytes]] = {}
    done = 0
    errors = 0
    stop = time.monotonic() + seconds
    finished = asyncio.Event()

    # Read from the current end, fixed before the first XADD ("$" would race with it).
    tail = await reader.xrevrange(names["results"], count=1)
    start_id = tail[0][0].decode() if tail else "0-0"

    async def read_results() -> None:
        last = start_id
        while not finished.is_set():
            reply = await reader.xread({names["results"]: last}, block=200, count=500)
            for _stream, items in reply or []:
                for entry_id, fields in items:
                    last = entry_id.decode()
                    future = waiting.pop(fields[b"id"].decode(), None)
                    if future is not None and not future.done():
                        future.set_result(fields[b"status"])

    async def producer(worker: int) -> None:
        nonlocal done, errors
        n = 0
        loop = asyncio.get_running_loop()
        while time.monotonic() < stop:
            # Unique per run: a reused id is answered once (the consumer's idempotency).
            request_id = f"{run}-{worker}-{n}"
            n += 1
            future: asyncio.Future[bytes] = loop.create_future()
            waiting[request_id] = future
            await client.xadd(names["stream"], {"id": request_id, "model": model, "body": body})
            status = await asyncio.wait_for(future, timeout=60)
            if status == b"200":
                done += 1
            else:
                errors += 1

    run = uuid.uuid4().hex[:12]
    results_task = asyncio.ensure_future(read_results())
    try:
        start = time.monotonic()
        await asyncio.gather(*(producer(w) for w in range(concurrency)))
        elapsed = time.monotonic() - start
    finally:
        finished.set()
        await results_task
        await client.aclose()
        await reader.aclose()
    return {"completed": done, "errors": errors, "per_s": done / elapsed}


def resp(*parts: bytes) -> bytes:
    """One Redis command in RESP (https://redis.io/docs/latest/develop/reference/protocol-spec/)."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        out += [b"$%d\r\n" % len(part), part, b"\r\n"]
    return b"".join(out)


class RespConnection(asyncio.Protocol):
    """One Redis connection carrying one command at a time, as podserve.bench.client's
    HttpConnection carries one request: a pre-encoded command, one transport.write, the
    reply parsed by hiredis. The producer's counterpart of the lean HTTP client."""

    def __init__(self) -> None:
        self._reader = hiredis.Reader()
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[Any] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # a TCP transport

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        reply = self._reader.gets()
        if reply is not False and self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(ConnectionError("redis closed the connection"))

    async def call(self, command: bytes) -> Any:
        assert self._transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self._transport.write(command)
        return await self._waiter

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def resp_connection(redis_url: str) -> RespConnection:
    host, port = redis_url.removeprefix("redis://").split("/")[0].split(":")
    _transport, protocol = await asyncio.get_running_loop().create_connection(
        RespConnection, host, int(port)
    )
    return protocol


async def lean_stream_rate(
    redis_url: str, names: dict[str, str], model: str, concurrency: int, seconds: float
) -> dict[str, Any]:
    """The closed loop with producers as lean as the HTTP client: each producer has its
    own connection and sends one pre-encoded XADD at a time; one reader XREADs results
    (COUNT 500) and parses them with hiredis."""
    body = BODIES[model]
    stream, results, model_b = names["stream"].encode(), names["results"].encode(), model.encode()
    waiting: dict[bytes, asyncio.Future[bytes]] = {}
    done = errors = 0
    stop = time.monotonic() + seconds
    finished = asyncio.Event()
    reader = await resp_connection(redis_url)
    tail = await reader.call(resp(b"XREVRANGE", results, b"+", b"-", b"COUNT", b"1"))
    start_id: bytes = tail[0][0] if tail else b"0-0"

    async def read_results() -> None:
        last = start_id
        while not finished.is_set():
            reply = await reader.call(
                resp(b"XREAD", b"COUNT", b"500", b"BLOCK", b"200", b"STREAMS", results, last)
            )
            for _stream, items in reply or []:
                for entry_id, fields in items:
                    last = entry_id
                    pairs = dict(zip(fields[::2], fields[1::2], strict=True))
                    future = waiting.pop(pairs[b"id"], None)
                    if future is not None and not future.done():
                        future.set_result(pairs[b"status"])

    async def producer(worker: int) -> None:
        nonlocal done, errors
        connection = await resp_connection(redis_url)
        loop = asyncio.get_running_loop()
        prefix = f"{run}-{worker}-".encode()
        n = 0
        try:
            while time.monotonic() < stop:
                request_id = prefix + str(n).encode()
                n += 1
                future: asyncio.Future[bytes] = loop.create_future()
                waiting[request_id] = future
                await connection.call(
                    resp(b"XADD", stream, b"*", b"id", request_id, b"model", model_b,
                         b"body", body)
                )  # fmt: skip
                status = await asyncio.wait_for(future, timeout=60)
                if status == b"200":
                    done += 1
                else:
                    errors += 1
        finally:
            connection.close()

    run = uuid.uuid4().hex[:12]
    results_task = asyncio.ensure_future(read_results())
    try:
        start = time.monotonic()
        await asyncio.gather(*(producer(w) for w in range(concurrency)))
        elapsed = time.monotonic() - start
    finally:
        finished.set()
        await results_task
        reader.close()
    return {"completed": done, "errors": errors, "per_s": done / elapsed}


Side = Callable[[float], Coroutine[Any, Any, dict[str, Any]]]


def compare(
    args: argparse.Namespace, root: Path, url: str, redis_pid: int, model: str
) -> dict[str, Any]:
    """HTTP, consume with redis-py producers and consume with lean producers, interleaved:
    `--rounds` rounds of one short segment per side, the server and the consumer both up
    throughout (the idle one blocks, costing nothing). On a shared machine other work
    comes and goes over seconds; interleaving gives each side the same share of it, and
    the median of the per-round ratios is the comparison. CPU is counted per process."""
    repo = repository(root, model)
    names = {"stream": f"req-{model}", "results": f"res-{model}"}
    segment_s = args.seconds / args.rounds
    with (
        serve(repo, root / f"serve-{model}.log") as (http, server_pid),
        consume(url, repo, names, root / f"consume-{model}.log") as consumer,
    ):
        c = args.concurrency
        stream_pids = {"consumer": consumer.pid, "redis": redis_pid, "producer": os.getpid()}
        sides: dict[str, tuple[Side, dict[str, int]]] = {
            "http": (
                lambda s: http_rate(http, model, c, s),
                {"server": server_pid, "client": os.getpid()},
            ),
            "consume": (lambda s: stream_rate(url, names, model, c, s), stream_pids),
            "consume_lean_producer": (
                lambda s: lean_stream_rate(url, names, model, c, s),
                stream_pids,
            ),
        }
        for run, _pids in sides.values():
            asyncio.run(run(1.0))  # warm-up
        info = redis.Redis.from_url(url)
        commands: dict[str, dict[str, int]] = {}  # Redis' time by command, lean rounds only
        # The model batches each side formed: the server's /metrics, the consumer's port.
        metrics_url = {
            "http": f"{http}/metrics",
            "consume": consumer_metrics_url(root / f"consume-{model}.log"),
        }
        metrics_url["consume_lean_producer"] = metrics_url["consume"]
        batches = {side: [0.0, 0.0] for side in sides}  # rows, model calls
        done = {side: 0 for side in sides}
        errors = {side: 0 for side in sides}
        elapsed = {side: 0.0 for side in sides}
        cpu: dict[str, dict[str, float]] = {side: {} for side in sides}
        rates: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(args.rounds):
            for side, (run, pids) in sides.items():
                before = {name: cpu_s(pid) for name, pid in pids.items()}
                lean = side == "consume_lean_producer"
                stats_before: dict[str, Any] = info.info("commandstats") if lean else {}
                rows, calls = batch_totals(metrics_url[side])
                result = asyncio.run(run(segment_s))
                rows_after, calls_after = batch_totals(metrics_url[side])
                batches[side][0] += rows_after - rows
                batches[side][1] += calls_after - calls
                if lean:
                    count_commands(commands, stats_before, info.info("commandstats"))
                for name, pid in pids.items():
                    cpu[side][name] = cpu[side].get(name, 0.0) + cpu_s(pid) - before[name]
                done[side] += result["completed"]
                errors[side] += result["errors"]
                elapsed[side] += result["completed"] / max(result["per_s"], 1e-9)
                rates[side].append(result["per_s"])
        info.close()
    out: dict[str, Any] = {}
    for side in sides:
        n = max(1, done[side])
        per = {name: round(1000 * used / n, 4) for name, used in cpu[side].items()}
        per["total"] = round(sum(per.values()), 4)
        out[side] = {
            "completed": done[side],
            "errors": errors[side],
            "per_s": round(done[side] / max(elapsed[side], 1e-9), 1),
            "per_round_per_s": [round(r) for r in rates[side]],
            "cpu_ms_per_request": per,
            "mean_model_batch": round(batches[side][0] / max(1.0, batches[side][1]), 2),
        }
    for side in ("consume", "consume_lean_producer"):
        ratios = [a / b for a, b in zip(rates[side], rates["http"], strict=True)]
        key = "consume_over_http" if side == "consume" else "consume_lean_over_http"
        out[key] = round(statistics.median(ratios), 3)
        out[key.replace("over_http", "per_round")] = [round(r, 3) for r in ratios]
    lean_n = max(1, out["consume_lean_producer"]["completed"])
    out["redis_per_entry"] = {
        name: {"calls": round(v["calls"] / lean_n, 3), "usec": round(v["usec"] / lean_n, 2)}
        for name, v in sorted(commands.items(), key=lambda kv: -kv[1]["usec"])
        if v["calls"]
    }
    http_cpu = out["http"]["cpu_ms_per_request"]
    lean_cpu = out["consume_lean_producer"]["cpu_ms_per_request"]
    # Requests per CPU-second, HTTP's cost over consume's: above 1, consume costs less.
    out["cpu_capacity"] = {
        "with_redis": round(http_cpu["total"] / lean_cpu["total"], 3),
        "without_redis": round(
            http_cpu["total"] / (lean_cpu["consumer"] + lean_cpu["producer"]), 3
        ),
        "pod_only": round(http_cpu["server"] / lean_cpu["consumer"], 3),
    }
    drained = drain_rate(url, root, model)
    out["backlog_drain"] = drained
    out["drain_over_http"] = round(drained["per_s"] / out["http"]["per_s"], 3)
    return out


def consumer_metrics_url(log: Path) -> str:
    """The consumer's metrics port, from its "consuming" log line (--metrics-port 0)."""
    for line in log.read_text().splitlines():
        if '"consuming"' in line:
            return f"http://127.0.0.1:{json.loads(line)['metrics_port']}/metrics"
    raise RuntimeError(f"{log}: no 'consuming' line")


def batch_totals(url: str) -> tuple[float, float]:
    """Rows batched and model calls so far (podserve_batch_size's _sum and _count)."""
    from prometheus_client.parser import text_string_to_metric_families

    rows = calls = 0.0
    for family in text_string_to_metric_families(httpx.get(url, timeout=10).text):
        for sample in family.samples:
            if sample.name == "podserve_batch_size_sum":
                rows += sample.value
            elif sample.name == "podserve_batch_size_count":
                calls += sample.value
    return rows, calls


def count_commands(
    into: dict[str, dict[str, int]], before: dict[str, Any], after: dict[str, Any]
) -> None:
    """Add the calls and microseconds each command took between two INFO commandstats."""
    for key, now in after.items():
        name = key.removeprefix("cmdstat_")
        if name == "info":
            continue  # ours
        was = before.get(key, {"calls": 0, "usec": 0})
        acc = into.setdefault(name, {"calls": 0, "usec": 0})
        acc["calls"] += int(now["calls"]) - int(was["calls"])
        acc["usec"] += int(now["usec"]) - int(was["usec"])


def drain_rate(redis_url: str, root: Path, model: str, total: int = 10_000) -> dict[str, Any]:
    """A backlog of `total` entries queued before the consumer starts (what KEDA wakes it
    to): how fast one consumer empties it, reading as many entries as its models batch."""
    repo = repository(root, model)
    names = {"stream": f"drain-{model}", "results": f"drain-res-{model}"}
    client = redis.Redis.from_url(redis_url)
    pipe = client.pipeline()
    for i in range(total):
        pipe.xadd(names["stream"], {"id": f"d{i}", "model": model, "body": BODIES[model]})
    pipe.execute()
    with consume(redis_url, repo, names, root / f"drain-{model}.log"):
        start = time.monotonic()
        wait_for(lambda: client.xlen(names["results"]) >= total, "backlog drained", 300)
        elapsed = time.monotonic() - start
    client.close()
    return {"entries": total, "seconds": round(elapsed, 2), "per_s": total / elapsed}


def kill_9_run(redis_url: str, root: Path, total: int = 2000) -> dict[str, Any]:
    repo = repository(root, "iris")
    names = {"stream": "kill-req", "results": "kill-res"}
    client = redis.Redis.from_url(redis_url)
    common = ("--claim-idle-ms", "2000", "--read-count", "16", "--max-inflight", "32")
    with (
        consume(redis_url, repo, names, root / "kill-c1.log", "--consumer", "c1", *common) as first,
        consume(redis_url, repo, names, root / "kill-c2.log", "--consumer", "c2", *common),
    ):
        pipe = client.pipeline()
        for i in range(total):
            pipe.xadd(names["stream"], {"id": f"k{i}", "model": "iris", "body": BODIES["iris"]})
        pipe.execute()
        start = time.monotonic()
        wait_for(lambda: client.xlen(names["results"]) >= total // 4, "a quarter answered")
        held = {
            c["name"].decode(): c["pending"]
            for c in client.xinfo_consumers(names["stream"], "bench")
        }
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        killed_at = time.monotonic()
        wait_for(lambda: client.xlen(names["results"]) >= total, "all answered", 180)
        wait_for(lambda: client.xinfo_groups(names["stream"])[0]["pending"] == 0, "no pending")
        finished = time.monotonic()
        ids = [f[b"id"] for _i, f in client.xrange(names["results"])]
    client.close()
    unique = set(ids)
    return {
        "entries": total,
        "results": len(ids),
        "unique_ids": len(unique),
        "lost": total - len(unique & {f"k{i}".encode() for i in range(total)}),
        "duplicated": len(ids) - len(unique),
        "pending_on_killed_consumer": held.get("c1", 0),
        "seconds_before_kill": round(killed_at - start, 2),
        "seconds_after_kill_to_all_answered": round(finished - killed_at, 2),
        "exactly_once": len(ids) == total == len(unique),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="per side, all rounds")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--models", nargs="*", default=sorted(BODIES))
    parser.add_argument(
        "--pin",
        action="store_true",
        help="redis-server on CPU 1, everything else on CPU 0 (Redis on a core of its own)",
    )
    args = parser.parse_args()
    if not redis_installed():
        raise SystemExit(f"{NOT_INSTALLED}: apt-get install redis-server")
    global REDIS_CPUS, OTHER_CPUS
    if args.pin:
        REDIS_CPUS, OTHER_CPUS = {1}, {0}
        _pin(OTHER_CPUS)  # this process: the HTTP clients and the producers
    report: dict[str, Any] = {
        "concurrency": args.concurrency,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "pinned": args.pin,
        "load_average_at_start": os.getloadavg(),
        "models": {},
    }
    with (
        tempfile.TemporaryDirectory(prefix="bench-consume-") as tmp,
        redis_server(cpus=REDIS_CPUS) as redis_process,
    ):
        url, redis_pid = redis_process.url, redis_process.pid
        root = Path(tmp)
        for model in args.models:
            report["models"][model] = compare(args, root, url, redis_pid, model)
            line = report["models"][model]
            print(
                f"{model}: closed loop at {args.concurrency}, median of {args.rounds} "
                f"interleaved rounds: consume/http x{line['consume_over_http']}, with lean "
                f"producers x{line['consume_lean_over_http']}; backlog drain "
                f"{line['backlog_drain']['per_s']:.0f}/s (x{line['drain_over_http']} the "
                f"http rate); CPU ms per request: http {line['http']['cpu_ms_per_request']}, "
                f"consume {line['consume']['cpu_ms_per_request']}, lean "
                f"{line['consume_lean_producer']['cpu_ms_per_request']}; mean model batch http "
                f"{line['http']['mean_model_batch']}, lean "
                f"{line['consume_lean_producer']['mean_model_batch']}; CPU capacity "
                f"consume/http {line['cpu_capacity']}; redis us per entry "
                f"{ {k: v['usec'] for k, v in list(line['redis_per_entry'].items())[:4]} }",
                flush=True,
            )
        report["kill_9"] = kill_9_run(url, root)
        report["load_average_at_end"] = os.getloadavg()
        print(f"kill -9: {json.dumps(report['kill_9'])}", flush=True)
    out = (
        REPO
        / "benchmarks"
        / "results"
        / f"consume-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0 if report["kill_9"]["exactly_once"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
