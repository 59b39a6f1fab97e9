"""A throwaway redis-server: a free loopback port, no persistence (`--save ""`, `--appendonly
no`), its working directory and log in a temp dir, in use once it answers a real PING. The
one starter for the consume and gateway tests and the consume benchmarks
(benchmarks/consume.py, benchmarks/consume_retention.py), as tests/support/postgres.py is
for PostgreSQL."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.ports import free_port
from tests.support.server import wait_until

NOT_INSTALLED = "redis-server is not installed (Debian package redis-server)"


def redis_installed() -> bool:
    return shutil.which("redis-server") is not None


@dataclass(frozen=True, slots=True)
class RedisServer:
    url: str  # redis://127.0.0.1:<port>/0; a password, if any, is not in it
    port: int
    # The process itself, for callers that stop (SIGSTOP), kill or measure it.
    proc: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.proc.pid


@contextlib.contextmanager
def redis_server(
    port: int | None = None,
    args: Sequence[str] = (),
    *,
    password: str | None = None,
    cpus: set[int] | None = None,
    timeout_s: float = 20.0,
) -> Iterator[RedisServer]:
    """Start redis-server, yield it once it answers PING, stop it and remove its files.

    `port`: a given one (to start a server again where a stopped one was), else a free one.
    `args`: more server arguments; they come last, so they override the defaults above.
    `password`: started with `--requirepass`, and PINGed with it.
    `cpus`: the CPUs the server may run on (set in the child before exec, so every thread
    it starts inherits the mask). Skips the test when redis-server is not installed; a
    caller outside pytest checks `redis_installed()` first."""
    binary = shutil.which("redis-server")
    if binary is None:
        import pytest

        pytest.skip(NOT_INSTALLED)
    port = port or free_port()
    workdir = Path(tempfile.mkdtemp(prefix="redis-"))
    log = workdir / "redis.log"
    auth = [] if password is None else ["--requirepass", password]
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir)]
    command += ["--save", "", "--appendonly", "no", *auth, *args]
    # redis-server logs to stdout (`logfile ""`) and a bad argument to stderr: both go to a
    # file, which cannot fill up and block the server the way an unread pipe can.
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
    # One try a PING: redis-py 8's client retries a refused connection 10 times with
    # backoff (Redis.__init__'s default `retry` in redis/client.py, DEFAULT_RETRY_COUNT in
    # redis/_defaults.py), about 4 s a PING here, which would hide a server that has exited.
    client = redis.Redis(
        host="127.0.0.1",
        port=port,
        password=password,
        socket_connect_timeout=1,
        socket_timeout=1,
        retry=Retry(NoBackoff(), 0),
    )

    def answers() -> bool:
        if proc.poll() is not None:  # a bad argument or a taken port: say why, now
            said = log.read_text(errors="replace").strip()[-2000:]
            raise RuntimeError(f"redis-server exited with {proc.returncode}: {said}")
        try:
            return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError):  # not listening yet, or LOADING
            return False

    try:
        try:
            wait_until(answers, timeout_s=timeout_s, what=f"redis-server on {port} to answer PING")
        finally:
            client.close()
        yield RedisServer(f"redis://127.0.0.1:{port}/0", port, proc)
    finally:
        _stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (redis-server exits at once without persistence), SIGKILL if it lingers."""
    if proc.poll() is None:
        # A caller may have left it stopped (SIGSTOP); a stopped process acts on SIGTERM
        # only once it runs again.
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def redis_cluster_server(timeout_s: float = 20.0) -> Iterator[RedisServer]:
    """A one-node Redis Cluster: redis-server in cluster mode holding all 16,384 slots
    (`CLUSTER ADDSLOTSRANGE`, Redis 7.0+). One node is enough to prove cluster-mode
    behaviour that does not depend on where slots live: scripts whose declared keys span
    slots are refused (by redis-py's cluster client before they are sent, and by the
    server), and a cluster client's MOVED/ASK handling has a real cluster to talk to."""
    # The cluster bus listens on `cluster-port`, by default the port + 10000, which for a
    # free port above 55535 does not exist: give it a free port of its own.
    args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
    with redis_server(args=(*args, "--cluster-port", str(free_port()))) as server:
        client = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=2)
        try:
            # redis-py types no CLUSTER method on its standalone client, nor execute_command
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)  # type: ignore[no-untyped-call]

            def healthy() -> bool:
                info = client.execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
                return "cluster_state:ok" in (info.decode() if isinstance(info, bytes) else info)

            wait_until(healthy, timeout_s=timeout_s, what="the one-node cluster to be ok")
        finally:
            client.close()
        yield server
