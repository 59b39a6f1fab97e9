"""Shared parts of the reliability harnesses (rollout.py, overload.py, soak.py): real
`podserve serve` processes on free ports, their RSS and open file descriptors from /proc,
and asyncio clients for the three kinds of traffic (OIP v2 REST, OIP v2 gRPC, OpenAI SSE
streams) that record every outcome instead of stopping at the first error.

Black-box: everything goes through the HTTP and gRPC surface a load balancer sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import orjson
from tritonclient.grpc import service_pb2 as triton_pb
from tritonclient.grpc import service_pb2_grpc as triton_stub

REPO_ROOT = Path(__file__).resolve().parent.parent
MODELS = REPO_ROOT / "examples" / "models"
RESULTS = REPO_ROOT / "benchmarks" / "results"
IRIS_ROW = [5.1, 3.5, 1.4, 0.2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def repository(root: Path, models: tuple[str, ...]) -> Path:
    """A model repository holding copies of the named example models."""
    root.mkdir(parents=True, exist_ok=True)
    for name in models:
        if not (root / name).exists():
            shutil.copytree(MODELS / name, root / name)
    return root


# -- processes -----------------------------------------------------------------------------


class Replica:
    """One `podserve serve` process with its own HTTP and gRPC ports (a pod)."""

    def __init__(
        self, name: str, repo: Path, log_dir: Path, *, extra: tuple[str, ...] = ()
    ) -> None:
        self.name = name
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.log_path = log_dir / f"{name}.log"
        self.command = [
            sys.executable,
            "-m",
            "podserve.cli.main",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.http_port),
            "--grpc-port",
            str(self.grpc_port),
            "--model-repository",
            str(repo),
            "--log-format",
            "json",
            "--access-log-sample-rate",
            "0",
            *extra,
        ]
        self.process: subprocess.Popen[bytes] | None = None
        self.started_s = 0.0
        self.sigterm_s: float | None = None
        self.sigterm_wall_s: float | None = None  # to line up with the logs' timestamps
        self.exit_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> Replica:
        log = self.log_path.open("ab")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        # PODSERVE_BENCH_SRC: measure another source tree (e.g. a `git archive` of a
        # commit) with this environment's dependencies; it wins over the editable install.
        source = os.environ.get("PODSERVE_BENCH_SRC")
        if source:
            env["PYTHONPATH"] = str(Path(source).resolve())
        self.process = subprocess.Popen(
            self.command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT
        )
        log.close()
        self.started_s = time.monotonic()
        return self

    def wait_ready(self, timeout_s: float = 240.0) -> float:
        """Poll /ready as a readiness probe does; the seconds it took from start."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.process.returncode}: {self.tail()}")
            with (
                contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError),
                urllib.request.urlopen(f"{self.url}/ready", timeout=2) as response,
            ):
                if response.status == 200:
                    return time.monotonic() - self.started_s
            time.sleep(0.25)  # a probe period, not synchronisation of our own code
        raise RuntimeError(f"{self.name} not ready after {timeout_s:.0f} s: {self.tail()}")

    def sigterm(self) -> None:
        assert self.process is not None
        self.sigterm_s = time.monotonic()
        self.sigterm_wall_s = time.time()
        self.process.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout_s: float = 120.0) -> int:
        assert self.process is not None
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.exit_s = time.monotonic()
        return code

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            self.wait_exit(30)

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def log_records(self) -> list[dict[str, Any]]:
        records = []
        for line in self.log_path.read_bytes().splitlines():
            with contextlib.suppress(orjson.JSONDecodeError):
                record = orjson.loads(line)
                if isinstance(record, dict):
                    records.append(record)
        return records


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# -- outcomes ------------------------------------------------------------------------------


@dataclass
class Tally:
    """Outcomes of one kind of traffic: `ok`, or the reason it failed."""

    outcomes: Counter[str] = field(default_factory=Counter)
    latencies_s: list[float] = field(default_factory=list)
    failures: list[tuple[float, str]] = field(default_factory=list)  # (monotonic s, reason)

    def record(self, outcome: str, latency_s: float | None = None) -> None:
        self.outcomes[outcome] += 1
        if outcome == "ok" and latency_s is not None:
            self.latencies_s.append(latency_s)
        elif outcome != "ok":
            self.failures.append((time.monotonic(), outcome))

    @property
    def total(self) -> int:
        return sum(self.outcomes.values())

    @property
    def failed(self) -> int:
        return self.total - self.outcomes["ok"]

    def summary(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "ok": self.outcomes["ok"],
            "failed": self.failed,
            "by_outcome": dict(sorted(self.outcomes.items())),
            "p50_ms": percentile_ms(self.latencies_s, 50),
            "p99_ms": percentile_ms(self.latencies_s, 99),
        }


def percentile_ms(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0] * 1000, 2)
    return round(statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] * 1000, 2)


def _reason(exc: BaseException) -> str:
    return type(exc).__name__


# -- clients -------------------------------------------------------------------------------


def iris_body(rows: int = 1) -> bytes:
    data = IRIS_ROW * rows
    return orjson.dumps(
        {"inputs": [{"name": "features", "shape": [rows, 4], "datatype": "FP32", "data": data}]}
    )


async def rest_once(client: httpx.AsyncClient, base: str, tally: Tally, body: bytes) -> int | None:
    start = time.monotonic()
    try:
        response = await client.post(
            f"{base}/v2/models/iris/infer",
            content=body,
            headers={"content-type": "application/json"},
        )
    except httpx.HTTPError as exc:
        tally.record(f"rest:{_reason(exc)}")
        return None
    if response.status_code == 200 and "outputs" in response.json():
        tally.record("ok", time.monotonic() - start)
    else:
        tally.record(f"rest:{response.status_code}")
    return response.status_code


async def rest_loop(base: str, tally: Tally, stop: asyncio.Event, *, pause_s: float = 0.0) -> None:
    body = iris_body()
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        while not stop.is_set():
            await rest_once(client, base, tally, body)
            if pause_s:
                await asyncio.sleep(pause_s)  # pacing of an open-loop client, not a sync


def grpc_request() -> triton_pb.ModelInferRequest:
    request = triton_pb.ModelInferRequest(model_name="iris")
    request.inputs.add(name="features", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(np.array([IRIS_ROW], dtype="<f4").tobytes())
    return request


async def grpc_loop(
    target: str, tally: Tally, stop: asyncio.Event, *, pause_s: float = 0.0
) -> None:
    request = grpc_request()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = triton_stub.GRPCInferenceServiceStub(channel)
        while not stop.is_set():
            start = time.monotonic()
            try:
                response = await stub.ModelInfer(request, timeout=30)
            except grpc.aio.AioRpcError as exc:
                tally.record(f"grpc:{exc.code().name}")
            else:
                ok = bool(response.raw_output_contents)
                tally.record("ok" if ok else "grpc:empty", time.monotonic() - start)
            if pause_s:
                await asyncio.sleep(pause_s)


async def sse_once(
    client: httpx.AsyncClient, base: str, tally: Tally, *, max_tokens: int = 24
) -> None:
    """One streamed completion. `cut`: it started (200, events came) and ended without a
    finish_reason and `[DONE]`; any other failure is before the first byte."""
    body = {
        "model": "tiny-lm",
        "prompt": "def add(a, b):",
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    start = time.monotonic()
    events = 0
    finished = done = False
    try:
        async with client.stream("POST", f"{base}/v1/completions", json=body) as response:
            if response.status_code != 200:
                await response.aread()
                tally.record(f"sse:{response.status_code}")
                return
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    done = True
                    continue
                events += 1
                chunk = orjson.loads(payload)
                if "error" in chunk:
                    tally.record("sse:error_event")
                    return
                if any(c.get("finish_reason") for c in chunk.get("choices", ())):
                    finished = True
    except httpx.HTTPError as exc:
        tally.record("sse:cut" if events else f"sse:{_reason(exc)}")
        return
    if finished and done:
        tally.record("ok", time.monotonic() - start)
    else:
        tally.record("sse:cut" if events else "sse:empty")


async def sse_loop(base: str, tally: Tally, stop: asyncio.Event, *, max_tokens: int = 24) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        while not stop.is_set():
            await sse_once(client, base, tally, max_tokens=max_tokens)


async def probe_loop(
    url: str, samples: list[tuple[float, float, int]], stop: asyncio.Event
) -> None:
    """GET `url` every 0.5 s, as a kubelet probe does: (time, latency s, status or 0)."""
    async with httpx.AsyncClient(timeout=10) as client:
        while not stop.is_set():
            start = time.monotonic()
            try:
                status = (await client.get(url)).status_code
            except httpx.HTTPError:
                status = 0
            samples.append((start, time.monotonic() - start, status))
            await asyncio.sleep(0.5)  # the probe period


def write_report(path: Path, report: dict[str, Any]) -> None:
    """The report, with what was measured: the source tree and the repository's HEAD."""
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    report = {
        **report,
        "podserve_src": os.environ.get("PODSERVE_BENCH_SRC", "working tree"),
        "git_head": head,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
