"""Run a real `podserve serve` process on 127.0.0.1 with free ports, and read its JSON logs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

import httpx
import openai

START_TIMEOUT_S = 60.0


def wait_until(
    predicate: Callable[[], bool], timeout_s: float = 20.0, what: str = "condition"
) -> None:
    """Poll a real condition (a probe, a metric, a log line) until it holds."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.02)


class ServerProcess:
    def __init__(self, *args: str, env: dict[str, str] | None = None, grpc: bool = False) -> None:
        self.args = list(args)
        self.env = {**os.environ, **(env or {})}
        self.grpc = grpc
        self.logs: list[dict[str, Any]] = []
        self.raw_lines: list[str] = []
        self._lock = threading.Condition()
        self.proc: subprocess.Popen[str] | None = None
        self.http_port = 0
        self.grpc_port: int | None = None

    # --- process ---------------------------------------------------------------------
    def start(self) -> ServerProcess:
        cmd = [
            sys.executable,
            "-m",
            "podserve.cli.main",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--grpc-port",
            "0" if self.grpc else "-1",
            "--log-format",
            "json",
            *self.args,
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=self.env
        )
        self._reader = threading.Thread(target=self._read_logs, daemon=True)
        self._reader.start()
        line = self.wait_log(lambda r: r.get("msg") == "podserve listening", START_TIMEOUT_S)
        self.http_port = int(line["http_port"])
        self.grpc_port = line.get("grpc_port")
        return self

    def _read_logs(self) -> None:
        assert self.proc is not None
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            with self._lock:
                self.raw_lines.append(raw)
                with contextlib.suppress(json.JSONDecodeError):  # not every line is ours
                    self.logs.append(json.loads(raw))
                self._lock.notify_all()

    def wait_log(
        self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 20.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                for record in self.logs:
                    if predicate(record):
                        return record
                if (
                    self.proc is not None
                    and self.proc.poll() is not None
                    and not self._reader.is_alive()
                ):
                    raise AssertionError(
                        f"server exited ({self.proc.returncode}) before the log line appeared:\n"
                        + "".join(self.raw_lines[-30:])
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        "log line not seen; last lines:\n" + "".join(self.raw_lines[-30:])
                    )
                self._lock.wait(min(remaining, 0.2))

    def send_signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait_exit(self, timeout_s: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout_s)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._reader.join(timeout=10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def __enter__(self) -> Self:
        self.start()  # a subclass (tests/gateway/support.py) starts another command
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- HTTP helpers ----------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def client(self, timeout_s: float = 30.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout_s)

    def get(self, path: str) -> httpx.Response:
        with self.client() as client:
            return client.get(path)

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        """The value of one sample in /metrics, parsed with prometheus_client's parser."""
        from prometheus_client.parser import text_string_to_metric_families

        text = self.get("/metrics").text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in (labels or {}).items()
                ):
                    return float(sample.value)
        return 0.0


def write_model(root: Path, name: str, *, runtime: str = "fake", **config: Any) -> Path:
    """A model directory with a model.yaml (fake runtime: y = 2x on input x, FP32 [-1, 3])."""
    import yaml

    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    body: dict[str, Any] = {
        "runtime": runtime,
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}],
    }
    body.update(config)
    (directory / "model.yaml").write_text(yaml.safe_dump(body))
    return directory


def infer_body(values: list[float], **extra: Any) -> dict[str, Any]:
    rows = len(values) // 3
    return {
        "inputs": [{"name": "x", "shape": [rows, 3], "datatype": "FP32", "data": values}],
        **extra,
    }


def post_then_live(server: ServerProcess, route: str, body: dict[str, Any]) -> httpx.Response:
    """POST `body` as JSON, then check the server still answers `/healthz`."""
    with server.client() as client:
        response = client.post(
            route, content=json.dumps(body).encode(), headers={"content-type": "application/json"}
        )
    assert server.get("/healthz").status_code == 200
    return response


@contextlib.contextmanager
def serving_models(models: dict[str, Path]) -> Iterator[ServerProcess]:
    """A server of `models` (name -> model directory), offline, once every model is ready."""
    args = [arg for name, path in models.items() for arg in ("--model", f"{name}={path}")]
    with ServerProcess(*args, env={"HF_HUB_OFFLINE": "1"}) as process:
        wait_until(lambda: process.get("/ready").status_code == 200, timeout_s=120, what="ready")
        yield process


def openai_client(server: ServerProcess) -> openai.OpenAI:
    """The openai SDK on `server`'s /v1, without retries (a test sees every answer)."""
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
