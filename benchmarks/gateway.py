"""The gateway, measured (issue 14): overhead, budgets, limits, canary split, routing, retries.

    python benchmarks/gateway.py [--phases overhead,budget,limits,canary,routing,retries]
                                 [--seconds 8] [--canary-requests 20000]

Real parts only: `podserve serve` pods on loopback (iris for W1-sized OIP requests — one
row of four floats — and the bundled tiny-lm), `podserve gateway` processes, redis-server
and PostgreSQL 15 started on free ports. Every comparison is a ratio within this one run.

1. overhead: c=64 closed-loop clients, OIP v2 iris infer and non-streamed completions
   (max_tokens 4), direct to the pod and through one gateway (SQLite store), `--seconds`
   each, in six alternating slices (the machine is shared and its load drifts):
   p50 latency added and req/s ratio; streaming TTFT added (c=8); the gateway's own
   `x-podserve-gateway-overhead-ms` p50.
2. budget: 3 gateway replicas on Redis + PostgreSQL, one key with budget B, 64 concurrent
   streaming clients with random max_tokens (8-64), 20% cancelled mid-stream: spend <= B,
   the ledger equal to the sum of usage x price, false rejections.
3. limits: 3 replicas, one key with rpm and tpm limits, 64 clients: admitted requests and
   tokens per minute window, against the limits.
4. canary: a 5% pool over `--canary-requests` requests: its share.
5. routing: two tiny-lm pods, a side client putting 4x the load on one; gateway p99 with
   least-loaded routing vs round-robin.
6. retries: a pool with a pod that sheds every request (503) beside a healthy one:
   attempts / requests; then Redis stopped: time to the 503 (fail closed).

Results: stdout and benchmarks/results/gateway-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness

ROOT = harness.REPO_ROOT
TINY = ROOT / "examples" / "models" / "tiny-lm"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
PRICES = {
    "tiny-lm": {
        "inputPerMillionUsd": 1.0,
        "outputPerMillionUsd": 2.0,
        "tokenizer": str(TINY / "tokenizer.json"),
    }
}
PROMPT = "The function returns"


def _str_keys(counts: Counter[int]) -> dict[str, int]:
    return {str(k): v for k, v in counts.items()}


def pct(values: list[float], q: float) -> float | None:
    return harness.percentile_ms(values, q)


# --- processes ------------------------------------------------------------------------
class Gateway:
    def __init__(self, config: dict[str, Any], workdir: Path, name: str) -> None:
        self.workdir = workdir
        self.config = workdir / f"{name}.yaml"
        self.config.write_text(yaml.safe_dump(config))
        self.port = harness.free_port()
        self.log = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Gateway:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "podserve.cli.main",
                    "gateway",
                    "--config",
                    str(self.config),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/ready", timeout=1).status_code == 200:
                    return self
            time.sleep(0.1)  # a readiness poll
        raise RuntimeError(f"gateway did not start: {self.log.read_text()[-2000:]}")

    def key(self, *flags: str) -> str:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "podserve.cli.main",
                "gateway",
                "keys",
                "create",
                "--config",
                str(self.config),
                *flags,
            ],
            capture_output=True,
            text=True,
            cwd=self.workdir,
            check=True,
        )
        return done.stdout.strip().splitlines()[-1]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def pod(name: str, log_dir: Path, *models: str) -> harness.Replica:
    extra: list[str] = []
    for model in models:
        extra += ["--model", model]
    empty = log_dir / f"repo-{name}"
    empty.mkdir(exist_ok=True)
    return harness.Replica(name, empty, log_dir, extra=tuple(extra))


@contextlib.contextmanager
def redis_server() -> Any:
    port = harness.free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            break
        time.sleep(0.05)  # waiting for a child process to listen
    try:
        yield f"redis://127.0.0.1:{port}/0", proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def postgres_server() -> Any:
    import psycopg

    data = Path(tempfile.mkdtemp(prefix="gwbench-pg-"))
    port = harness.free_port()
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
        # runuser lives in /usr/sbin, which a minimal PATH (CI's `env -i`) leaves out.
        sbin = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
        as_user = [shutil.which("runuser", path=sbin) or "runuser", "-u", "postgres", "--"]
    subprocess.run(
        [
            *as_user,
            str(PG_BIN / "initdb"),
            "-D",
            str(data / "db"),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
    )
    proc = subprocess.Popen(
        [
            *as_user,
            str(PG_BIN / "postgres"),
            "-D",
            str(data / "db"),
            "-p",
            str(port),
            "-h",
            "127.0.0.1",
            "-k",
            str(data),
            "-c",
            "fsync=off",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    for _ in range(200):
        try:
            psycopg.connect(dsn, connect_timeout=1).close()
            break
        except psycopg.OperationalError:
            time.sleep(0.1)  # waiting for the postmaster
    try:
        yield dsn
    finally:
        subprocess.run(
            [*as_user, str(PG_BIN / "pg_ctl"), "-D", str(data / "db"), "stop", "-m", "fast"],
            capture_output=True,
        )
        proc.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)


# --- load -----------------------------------------------------------------------------
async def _closed_loop_raw(
    url: str,
    path: str,
    body: bytes,
    clients: int,
    seconds: float,
    headers: dict[str, str] | None = None,
) -> tuple[list[float], list[float], Counter[int], float]:
    """(latencies of 200s, their overhead headers, codes, elapsed s). The client is aiohttp:
    httpx would spend ~1 ms of this machine's two cores per request on the client side."""
    import aiohttp

    latencies: list[float] = []
    overheads: list[float] = []
    codes: Counter[int] = Counter()
    stop_at = time.monotonic() + seconds
    send_headers = {"content-type": "application/json", **(headers or {})}
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=clients), timeout=timeout
    ) as http:

        async def worker() -> None:
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                try:
                    async with http.post(url + path, data=body, headers=send_headers) as reply:
                        await reply.read()
                        status = reply.status
                        header = reply.headers.get("x-podserve-gateway-overhead-ms")
                except (aiohttp.ClientError, TimeoutError):
                    codes[0] += 1
                    continue
                codes[status] += 1
                if status == 200:
                    latencies.append(time.perf_counter() - started)
                    if header is not None:
                        overheads.append(float(header) / 1000)

        began = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.monotonic() - began
    return latencies, overheads, codes, elapsed


def _summary(
    latencies: list[float], overheads: list[float], codes: Counter[int], elapsed: float
) -> dict[str, Any]:
    return {
        "rps": round(len(latencies) / elapsed, 1),
        "p50_ms": pct(latencies, 50),
        "p99_ms": pct(latencies, 99),
        "codes": _str_keys(codes),
        "header_overhead_p50_ms": pct(overheads, 50),
    }


async def closed_loop(
    url: str,
    path: str,
    body: bytes,
    clients: int,
    seconds: float,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    return _summary(*await _closed_loop_raw(url, path, body, clients, seconds, headers))


def interleaved(
    direct_url: str,
    gateway_url: str,
    path: str,
    body: bytes,
    clients: int,
    seconds: float,
    headers: dict[str, str],
    slices: int = 6,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Direct and gateway in alternating slices (ABBA...), so a neighbour's burst on this
    shared machine lands on both sides instead of on whichever ran second."""
    sides: dict[str, list[Any]] = {
        "direct": [[], [], Counter(), 0.0],
        "gateway": [[], [], Counter(), 0.0],
    }
    for i in range(slices):
        order = ("direct", "gateway") if i % 2 == 0 else ("gateway", "direct")
        for side in order:
            url = direct_url if side == "direct" else gateway_url
            lat, ovh, codes, elapsed = asyncio.run(
                _closed_loop_raw(
                    url,
                    path,
                    body,
                    clients,
                    seconds / slices,
                    headers if side == "gateway" else None,
                )
            )
            acc = sides[side]
            acc[0] += lat
            acc[1] += ovh
            acc[2].update(codes)
            acc[3] += elapsed
    return _summary(*sides["direct"]), _summary(*sides["gateway"])


async def ttft(
    url: str, clients: int, rounds: int, headers: dict[str, str] | None = None
) -> list[float]:
    body = {"model": "tiny-lm", "prompt": PROMPT, "max_tokens": 8, "stream": True}
    out: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:

        async def worker() -> None:
            for _ in range(rounds):
                started = time.perf_counter()
                async with http.stream(
                    "POST", "/v1/completions", json=body, headers=headers or {}
                ) as reply:
                    first = True
                    async for line in reply.aiter_lines():
                        if first and line.startswith("data: {"):
                            out.append(time.perf_counter() - started)
                            first = False

        await asyncio.gather(*(worker() for _ in range(clients)))
    return out


def phase_overhead(work: Path, seconds: float) -> dict[str, Any]:
    p = pod("ov", work, f"tiny-lm={TINY}", f"iris={harness.MODELS / 'iris'}").start()
    p.wait_ready()
    gw = Gateway(
        {
            "store": {"kind": "sqlite", "path": "ov.db"},
            "pools": [{"name": "pods", "models": ["tiny-lm", "iris"], "endpoints": [p.url]}],
            "prices": PRICES,
        },
        work,
        "ov",
    ).start()
    try:
        key = {"authorization": f"Bearer {gw.key('--team', 'bench')}"}
        iris = harness.iris_body(1)
        completion = json.dumps(
            {"model": "tiny-lm", "prompt": PROMPT, "max_tokens": 4, "ignore_eos": True}
        ).encode()
        result: dict[str, Any] = {}
        for name, path, body in (
            ("oip_w1", "/v2/models/iris/infer", iris),
            ("completions", "/v1/completions", completion),
        ):
            asyncio.run(closed_loop(p.url, path, body, 64, 1))  # warm both
            asyncio.run(closed_loop(gw.url, path, body, 64, 1, key))
            direct, via = interleaved(p.url, gw.url, path, body, 64, seconds, key)
            result[name] = {
                "direct": direct,
                "gateway": via,
                "p50_added_ms": round(via["p50_ms"] - direct["p50_ms"], 2),
                "rps_ratio": round(via["rps"] / direct["rps"], 3),
            }
        d = asyncio.run(ttft(p.url, 8, 10))
        g = asyncio.run(ttft(gw.url, 8, 10, key))
        result["stream_ttft"] = {
            "direct_p50_ms": pct(d, 50),
            "gateway_p50_ms": pct(g, 50),
            "added_p50_ms": round((pct(g, 50) or 0) - (pct(d, 50) or 0), 2),
        }
        return result
    finally:
        gw.stop()
        p.stop()


# --- budget ---------------------------------------------------------------------------
def _shared_config(redis_url: str, dsn: str, endpoints: list[str]) -> dict[str, Any]:
    return {
        "store": {"kind": "redis-postgres", "redis": redis_url, "postgres": dsn},
        "pools": [{"name": "pods", "models": ["tiny-lm"], "endpoints": endpoints}],
        "prices": PRICES,
        "storeTimeoutMs": 2000,
        "defaults": {"maxTokens": 64},
    }


def _cost(prompt: int, completion: int) -> int:
    return -(-(prompt * 1000 + completion * 2000) // 1000)  # micro-dollars, as billed


async def budget_clients(
    urls: list[str], key: str, attempts: int, seed: int
) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    records: list[dict[str, Any]] = []
    queue = list(range(attempts))
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=128)) as http:

        async def worker(w: int) -> None:
            while queue:
                i = queue.pop()
                max_tokens = rng.randint(8, 64)
                cancel_after = rng.randint(1, 6) if rng.random() < 0.2 else None
                body = {
                    "model": "tiny-lm",
                    "prompt": PROMPT,
                    "max_tokens": max_tokens,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
                rec: dict[str, Any] = {
                    "rid": f"bench-{i}",
                    "max_tokens": max_tokens,
                    "cancel": cancel_after,
                    "sent_s": time.time(),
                }
                received, usage = 0, None
                async with http.stream(
                    "POST",
                    f"{urls[i % len(urls)]}/v1/completions",
                    json=body,
                    headers={"authorization": f"Bearer {key}", "x-request-id": rec["rid"]},
                ) as reply:
                    rec["code"] = reply.status_code
                    rec["admitted_s"] = time.time()
                    if reply.status_code == 200:
                        async for line in reply.aiter_lines():
                            if not line.startswith("data: {"):
                                continue
                            chunk = json.loads(line[6:])
                            if chunk.get("choices"):
                                received += 1
                            if chunk.get("usage"):
                                usage = chunk["usage"]
                            if cancel_after is not None and received >= cancel_after:
                                break
                    else:
                        await reply.aread()
                rec["received"] = received
                rec["usage"] = usage
                rec["done_s"] = time.time()
                records.append(rec)

        await asyncio.gather(*(worker(w) for w in range(64)))
    return records


def phase_budget(work: Path, budget_usd: float, attempts: int) -> dict[str, Any]:
    import psycopg

    pods = [pod(f"b{i}", work, f"tiny-lm={TINY}").start() for i in range(2)]
    for p in pods:
        p.wait_ready()
    with redis_server() as (redis_url, _), postgres_server() as dsn:
        config = _shared_config(redis_url, dsn, [p.url for p in pods])
        gws = [Gateway(config, work, f"bud{i}").start() for i in range(3)]
        try:
            key = gws[0].key("--team", "budget", "--budget-usd", str(budget_usd))
            records = asyncio.run(budget_clients([g.url for g in gws], key, attempts, 7))
            # Let the last settlements reach the ledger (the writer drains every 0.2 s).
            admitted = sum(1 for r in records if r["code"] == 200)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                with psycopg.connect(dsn) as conn:
                    count = conn.execute("SELECT COUNT(*) FROM gateway_ledger").fetchone()
                if count is not None and count[0] >= admitted:
                    break
                time.sleep(0.2)  # polling the ledger the gateways write
            spend = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "podserve.cli.main",
                    "gateway",
                    "spend",
                    "--by",
                    "key",
                    "--format",
                    "json",
                    "--config",
                    str(gws[0].config),
                ],
                capture_output=True,
                text=True,
                check=True,
                cwd=work,
            )
            with psycopg.connect(dsn) as conn:
                rows = conn.execute(
                    "SELECT request_id, status, prompt_tokens, completion_tokens, cost_micro "
                    "FROM gateway_ledger"
                ).fetchall()
        finally:
            for g in gws:
                g.stop()
    for p in pods:
        p.stop()
    return _budget_report(records, rows, round(budget_usd * 1e6), json.loads(spend.stdout))


def _budget_report(
    records: list[dict[str, Any]],
    rows: list[tuple[Any, ...]],
    budget_micro: int,
    spend_cli: Any,
) -> dict[str, Any]:
    ledger = {
        r[0]: {"status": r[1], "prompt": r[2], "completion": r[3], "cost": r[4]} for r in rows
    }
    admitted = [r for r in records if r["code"] == 200]
    refused = [r for r in records if r["code"] == 429]
    # 1. The ledger is usage x price, row by row, and complete.
    priced_wrong = sum(
        1 for v in ledger.values() if v["cost"] != _cost(v["prompt"], v["completion"])
    )
    missing = [r["rid"] for r in admitted if r["rid"] not in ledger]
    # 2. Where the client saw the upstream's usage, the ledger holds exactly that usage.
    usage_mismatch = 0
    cancel_under = 0
    for r in admitted:
        row = ledger.get(r["rid"])
        if row is None:
            continue
        if r["usage"] is not None:
            u = r["usage"]
            usage_mismatch += (row["status"], row["prompt"], row["completion"]) != (
                "ok",
                u["prompt_tokens"],
                u["completion_tokens"],
            )
        else:  # the client left: charged prompt + tokens sent (>= what it read)
            cancel_under += row["completion"] < r["received"]
    # 3. False rejections: refused although the budget, less the real (ledger) cost of every
    # request admitted before the refusal, still covered this request's full need.
    timeline = sorted(
        (r["admitted_s"], ledger[r["rid"]]["cost"]) for r in admitted if r["rid"] in ledger
    )
    false_rejections = 0
    for r in refused:
        spent_before = sum(c for t, c in timeline if t <= r["admitted_s"])
        if budget_micro - spent_before >= _cost(3, r["max_tokens"]):
            false_rejections += 1
    total = sum(v["cost"] for v in ledger.values())
    statuses = Counter(v["status"] for v in ledger.values())
    return {
        "budget_micro": budget_micro,
        "attempts": len(records),
        "admitted": len(admitted),
        "client_cancelled": sum(1 for r in admitted if r["usage"] is None),
        "refused_429": len(refused),
        "other_codes": _str_keys(
            Counter(r["code"] for r in records if r["code"] not in (200, 429))
        ),
        "ledger_rows_by_status": dict(statuses),
        "ledger_total_micro": total,
        "spend_within_budget": total <= budget_micro,
        "ledger_rows_not_usage_x_price": priced_wrong,
        "admitted_without_ledger_row": len(missing),
        "ledger_differs_from_upstream_usage": usage_mismatch,
        "cancelled_charged_below_received": cancel_under,
        "false_rejections": false_rejections,
        "false_rejection_rate": round(false_rejections / max(1, len(records)), 4),
        "spend_cli": spend_cli,
    }


# --- limits ---------------------------------------------------------------------------
def phase_limits(work: Path, seconds: float, rpm: int, tpm: int) -> dict[str, Any]:
    p = pod("lim", work, f"tiny-lm={TINY}").start()
    p.wait_ready()
    with redis_server() as (redis_url, _), postgres_server() as dsn:
        gws = [
            Gateway(_shared_config(redis_url, dsn, [p.url]), work, f"lim{i}").start()
            for i in range(3)
        ]
        try:
            key = gws[0].key("--team", "limits", "--rpm", str(rpm), "--tpm", str(tpm))
            per_window: dict[int, dict[str, int]] = defaultdict(
                lambda: {"requests": 0, "tokens": 0}
            )
            codes: Counter[int] = Counter()

            async def run() -> None:
                stop_at = time.monotonic() + seconds
                async with httpx.AsyncClient(timeout=60) as http:

                    async def worker(w: int) -> None:
                        while time.monotonic() < stop_at:
                            sent = time.time()
                            reply = await http.post(
                                f"{gws[w % 3].url}/v1/completions",
                                json={
                                    "model": "tiny-lm",
                                    "prompt": PROMPT,
                                    "max_tokens": random.randint(4, 24),
                                },
                                headers={"authorization": f"Bearer {key}"},
                            )
                            codes[reply.status_code] += 1
                            if reply.status_code == 200:
                                usage = reply.json()["usage"]
                                window = per_window[int(sent // 60)]
                                window["requests"] += 1
                                window["tokens"] += usage["total_tokens"]
                            else:
                                await asyncio.sleep(0.05)  # client pacing after a 429

                    await asyncio.gather(*(worker(w) for w in range(64)))

            asyncio.run(run())
        finally:
            for g in gws:
                g.stop()
    p.stop()
    # A request sent just before a window boundary may be admitted just after it: judge
    # windows by the gateway's own counters, which is what the bound is about, and report
    # the client's view next to it.
    return {
        "rpm_limit": rpm,
        "tpm_limit": tpm,
        "codes": _str_keys(codes),
        "windows_client_view": {str(k): v for k, v in sorted(per_window.items())},
        "max_requests_in_a_window": max((v["requests"] for v in per_window.values()), default=0),
        "max_tokens_in_a_window": max((v["tokens"] for v in per_window.values()), default=0),
    }


# --- canary ---------------------------------------------------------------------------
def phase_canary(work: Path, requests: int) -> dict[str, Any]:
    a = pod("ca", work, f"iris={harness.MODELS / 'iris'}").start()
    b = pod("cb", work, f"iris={harness.MODELS / 'iris'}").start()
    a.wait_ready()
    b.wait_ready()
    gw = Gateway(
        {
            "store": {"kind": "sqlite", "path": "canary.db"},
            "pools": [
                {"name": "stable", "models": ["iris"], "endpoints": [a.url], "weight": 95},
                {"name": "canary", "models": ["iris"], "endpoints": [b.url], "weight": 5},
            ],
        },
        work,
        "canary",
    ).start()
    try:
        key = gw.key()
        seen: Counter[str] = Counter()
        queue = list(range(requests))

        async def run() -> None:
            async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:

                async def worker() -> None:
                    while queue:
                        queue.pop()
                        try:
                            reply = await http.post(
                                "/v2/models/iris/infer",
                                content=harness.iris_body(1),
                                headers={"authorization": f"Bearer {key}"},
                            )
                        except httpx.HTTPError as exc:
                            seen[f"client error {type(exc).__name__}"] += 1
                            continue
                        seen[
                            reply.headers.get("x-podserve-gateway-upstream", str(reply.status_code))
                        ] += 1

                await asyncio.gather(*(worker() for _ in range(32)))

        asyncio.run(run())
    finally:
        gw.stop()
        a.stop()
        b.stop()
    return {
        "requests": requests,
        "by_upstream": dict(seen),
        "canary_share_pct": round(100 * seen["canary"] / requests, 3),
        "canary_share_of_routed_pct": round(
            100 * seen["canary"] / max(1, seen["canary"] + seen["stable"]), 3
        ),
    }


# --- routing --------------------------------------------------------------------------
def phase_routing(work: Path, seconds: float) -> dict[str, Any]:
    a = pod("ra", work, f"tiny-lm={TINY}").start()
    b = pod("rb", work, f"tiny-lm={TINY}").start()
    a.wait_ready()
    b.wait_ready()
    out: dict[str, Any] = {}
    body = json.dumps(
        {"model": "tiny-lm", "prompt": PROMPT, "max_tokens": 16, "ignore_eos": True}
    ).encode()
    try:
        for policy in ("round-robin", "least-loaded"):
            gw = Gateway(
                {
                    "store": {"kind": "sqlite", "path": f"r-{policy}.db"},
                    "pools": [{"name": "pods", "models": ["tiny-lm"], "endpoints": [a.url, b.url]}],
                    "routing": {"policy": policy, "scrapeIntervalMs": 50},
                },
                work,
                f"route-{policy}",
            ).start()
            try:
                key = {"authorization": f"Bearer {gw.key()}"}

                async def both(url: str, key: dict[str, str]) -> dict[str, Any]:
                    side_a = closed_loop(a.url, "/v1/completions", body, 16, seconds)
                    side_b = closed_loop(b.url, "/v1/completions", body, 4, seconds)
                    measured = closed_loop(url, "/v1/completions", body, 8, seconds, key)
                    results = await asyncio.gather(side_a, side_b, measured)
                    return results[2]

                out[policy] = asyncio.run(both(gw.url, key))
            finally:
                gw.stop()
    finally:
        a.stop()
        b.stop()
    rr, ll = out["round-robin"]["p99_ms"], out["least-loaded"]["p99_ms"]
    out["p99_ratio_least_loaded_over_round_robin"] = round(ll / rr, 3) if rr and ll else None
    return out


# --- retries and fail-closed ----------------------------------------------------------
class _Shedding(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(503)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def phase_retries(work: Path, requests: int) -> dict[str, Any]:
    p = pod("rt", work, f"iris={harness.MODELS / 'iris'}").start()
    p.wait_ready()
    stub = ThreadingHTTPServer(("127.0.0.1", 0), _Shedding)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    shed = f"http://127.0.0.1:{stub.server_address[1]}"
    result: dict[str, Any] = {}
    # breakerOpenS 0.5: the shedding pod comes back often, so retries keep being needed.
    gw = Gateway(
        {
            "store": {"kind": "sqlite", "path": "rt.db"},
            "pools": [{"name": "pods", "models": ["iris"], "endpoints": [shed, p.url]}],
            "routing": {"breakerOpenS": 0.5},
        },
        work,
        "retries",
    ).start()
    try:
        key = gw.key()
        codes: Counter[int] = Counter()
        with httpx.Client(base_url=gw.url, timeout=30) as http:
            for _ in range(requests):
                codes[
                    http.post(
                        "/v2/models/iris/infer",
                        content=harness.iris_body(1),
                        headers={"authorization": f"Bearer {key}"},
                    ).status_code
                ] += 1
            metrics = http.get("/metrics").text
        retries = sum(
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("podserve_gateway_retries_total")
        )
        result["retries"] = {
            "requests": requests,
            "codes": _str_keys(codes),
            "retries": retries,
            "attempts_over_requests": round((requests + retries) / requests, 3),
        }
    finally:
        gw.stop()
        stub.shutdown()
    with redis_server() as (redis_url, redis_proc), postgres_server() as dsn:
        config = _shared_config(redis_url, dsn, [p.url])
        config["pools"][0]["models"] = ["iris"]
        config.pop("storeTimeoutMs")  # the default deadline (40 ms)
        gw = Gateway(config, work, "closed").start()
        try:
            key = gw.key()
            with httpx.Client(base_url=gw.url, timeout=30) as http:
                headers = {"authorization": f"Bearer {key}"}
                for _ in range(20):  # warm the key cache and connections
                    http.post(
                        "/v2/models/iris/infer", content=harness.iris_body(1), headers=headers
                    )

                def measure() -> dict[str, Any]:
                    samples, refused = [], 0
                    for _ in range(50):
                        started = time.perf_counter()
                        reply = http.post(
                            "/v2/models/iris/infer",
                            content=harness.iris_body(1),
                            headers=headers,
                        )
                        samples.append(time.perf_counter() - started)
                        refused += reply.status_code == 503 and "retry-after" in reply.headers
                    return {
                        "requests": 50,
                        "503_with_retry_after": refused,
                        "p50_ms": pct(samples, 50),
                        "max_ms": round(max(samples) * 1000, 2),
                    }

                # A hung store (the process stopped: connections open, no answers), then a
                # dead one (connections refused).
                redis_proc.send_signal(signal.SIGSTOP)
                result["store_hung"] = measure()
                redis_proc.send_signal(signal.SIGCONT)
                redis_proc.terminate()
                redis_proc.wait()
                result["store_down"] = measure()
        finally:
            gw.stop()
    p.stop()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--phases", default="overhead,budget,limits,canary,routing,retries")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--canary-requests", type=int, default=20000)
    parser.add_argument("--budget-usd", type=float, default=0.005)
    parser.add_argument("--budget-attempts", type=int, default=192)
    args = parser.parse_args()
    report: dict[str, Any] = {
        "started": dt.datetime.now(dt.UTC).isoformat(),
        "cpus": os.cpu_count(),
    }
    with tempfile.TemporaryDirectory(prefix="gwbench-") as tmp:
        work = Path(tmp)
        for phase in args.phases.split(","):
            began = time.monotonic()
            if phase == "overhead":
                report[phase] = phase_overhead(work, args.seconds)
            elif phase == "budget":
                report[phase] = phase_budget(work, args.budget_usd, args.budget_attempts)
            elif phase == "limits":
                report[phase] = phase_limits(work, args.seconds * 2, rpm=60, tpm=800)
            elif phase == "canary":
                report[phase] = phase_canary(work, args.canary_requests)
            elif phase == "routing":
                report[phase] = phase_routing(work, args.seconds)
            elif phase == "retries":
                report[phase] = phase_retries(work, 200)
            else:
                raise SystemExit(f"unknown phase {phase}")
            report[phase]["phase_s"] = round(time.monotonic() - began, 1)
            print(json.dumps({phase: report[phase]}, indent=1), flush=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    harness.write_report(harness.RESULTS / f"gateway-{stamp}.json", report)
    print(f"wrote benchmarks/results/gateway-{stamp}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
