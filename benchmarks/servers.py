"""Servers under test as child processes on free ports, ready before they are measured."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

REPO_ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 180.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServerProcess:
    """A server started with `command` (which must listen on `port`), stopped on exit."""

    def __init__(
        self,
        name: str,
        command: list[str],
        port: int,
        ready_path: str,
        log_path: Path,
        env: dict[str, str] | None = None,
        *,
        process_group: bool = False,
    ) -> None:
        """`process_group`: start the server in a session of its own and stop the whole
        group, for servers whose workers are child processes that can outlive their
        parent's SIGTERM (seen with LitServe's forked API server and inference worker)."""
        self.name = name
        self.command = command
        self.port = port
        self.ready_path = ready_path
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        self.process_group = process_group
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ServerProcess:
        log = self.log_path.open("wb")
        self._process = subprocess.Popen(
            self.command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=REPO_ROOT,
            start_new_session=self.process_group,
        )
        log.close()
        self._wait_ready()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        process, self._process = self._process, None
        if process is not None:
            self._stop(process, 30.0)

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def sigterm_exit_s(self, timeout_s: float = 30.0) -> float:
        """SIGTERM the server and return the seconds until the process has exited."""
        process, self._process = self._process, None
        assert process is not None
        start = time.monotonic()
        self._stop(process, timeout_s)
        return time.monotonic() - start

    def _stop(self, process: subprocess.Popen[bytes], timeout_s: float) -> None:
        """SIGTERM (the group, if it has one), wait, SIGKILL what is left."""
        if self.process_group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        else:
            process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self.process_group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)

    def _wait_ready(self) -> None:
        # Polling is how Kubernetes waits too: a readiness probe until it answers 200.
        url = f"http://127.0.0.1:{self.port}{self.ready_path}"
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self._process.returncode}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.__exit__(None, None, None)
        raise RuntimeError(
            f"{self.name} not ready after {READY_TIMEOUT_S:.0f} s:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def podserve(name: str, repository: Path, log_dir: Path) -> ServerProcess:
    port = free_port()
    executable = Path(sys.executable).parent / "podserve"
    command = [
        str(executable) if executable.exists() else "podserve",
        "serve",
        "--model-repository",
        str(repository),
        "--port",
        str(port),
        "--grpc-port",
        "-1",
        "--log-format",
        "json",
        "--access-log-sample-rate",
        "0",
    ]
    return ServerProcess(name, command, port, "/ready", log_dir / f"{name}.log")


def baseline(name: str, model_dir: Path, log_dir: Path) -> ServerProcess:
    port = free_port()
    # As a user would start it: one worker, uvicorn's defaults (access log included).
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "baseline_app:app",
        "--app-dir",
        str(REPO_ROOT / "benchmarks"),
        "--port",
        str(port),
    ]
    return ServerProcess(
        name,
        command,
        port,
        "/health",
        log_dir / f"{name}.log",
        env={"BASELINE_MODEL_DIR": str(model_dir)},
    )
