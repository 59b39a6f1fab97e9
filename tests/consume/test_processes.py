"""`podserve consume` as real processes: SIGTERM drains, and kill -9 of one of two
consumers loses and duplicates nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import redis

from tests.consume.conftest import fresh_names
from tests.consume.replies import entries
from tests.support.redis import redis_server
from tests.support.server import wait_until, write_model

pytestmark = pytest.mark.slow


class ConsumerProcess:
    def __init__(self, redis_url: str, names: object, repository: Path, *extra: str) -> None:
        from podserve.consume.streams import StreamNames

        assert isinstance(names, StreamNames)
        cmd = [
            sys.executable,
            "-m",
            "podserve.cli.main",
            "consume",
            "--redis",
            redis_url,
            "--stream",
            names.requests,
            "--group",
            names.group,
            "--results-stream",
            names.results,
            "--model-repository",
            str(repository),
            "--metrics-port",
            "0",
            "--metrics-host",
            "127.0.0.1",
            *extra,
        ]
        env = {
            **os.environ,
            "PODSERVE_LOG_FORMAT": "json",
            "PODSERVE_CACHE_DIR": str(repository.parent / "cache"),
        }
        self.proc = subprocess.Popen(
            cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def saw(self, msg: str) -> bool:
        for line in list(self.lines):
            try:
                if orjson.loads(line).get("msg") == msg:
                    return True
            except orjson.JSONDecodeError:
                continue
        return False

    def wait_consuming(self) -> None:
        wait_until(
            lambda: self.saw("consuming") or self.proc.poll() is not None,
            timeout_s=60,
            what="the consumer to start",
        )
        assert self.proc.poll() is None, "".join(self.lines[-20:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._reader.join(timeout=10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    write_model(root, "slow", parameters={"delay_s": 0.05}, batching={"max_batch_size": 4})
    return root


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(redis_url)
    try:
        yield conn
    finally:
        conn.close()


def _body(i: int) -> bytes:
    return orjson.dumps(
        {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [i, i, i]}]}
    )


def test_sigterm_stops_reading_finishes_what_was_claimed_and_exits_0(
    redis_url: str, repository: Path, client: redis.Redis
) -> None:
    names = fresh_names()
    proc = ConsumerProcess(redis_url, names, repository, "--drain-timeout-s", "20")
    try:
        proc.wait_consuming()
        for i in range(200):
            client.xadd(names.requests, {"id": f"r{i}", "model": "slow", "body": _body(i)})
        wait_until(lambda: client.xlen(names.results) >= 4, timeout_s=30, what="first results")
        proc.proc.send_signal(signal.SIGTERM)
        assert proc.proc.wait(timeout=25) == 0, "".join(proc.lines[-20:])
        assert proc.saw("consumer stopped")
        (group,) = client.xinfo_groups(names.requests)
        assert group["pending"] == 0  # everything claimed was answered and acknowledged
        answered = client.xlen(names.results)
        assert answered + group["lag"] == 200  # the rest is still waiting, not lost
        assert answered < 200  # it did stop reading
    finally:
        proc.stop()


def test_kill_9_of_one_of_two_consumers_every_request_gets_exactly_one_result(
    redis_url: str, repository: Path, client: redis.Redis
) -> None:
    names = fresh_names()
    common = ("--claim-idle-ms", "1000", "--read-count", "4", "--max-inflight", "8")
    first = ConsumerProcess(redis_url, names, repository, "--consumer", "c1", *common)
    second = ConsumerProcess(redis_url, names, repository, "--consumer", "c2", *common)
    total = 600  # ~4 s of work for two consumers: c1 still holds entries when it dies
    try:
        first.wait_consuming()
        second.wait_consuming()
        for i in range(total):
            client.xadd(names.requests, {"id": f"r{i}", "model": "slow", "body": _body(i)})
        wait_until(lambda: client.xlen(names.results) >= 30, timeout_s=60, what="some results")
        # c1 must hold entries when it dies, or the test would prove nothing.
        wait_until(
            lambda: any(
                c["name"] == b"c1" and c["pending"] > 0
                for c in client.xinfo_consumers(names.requests, names.group)
            ),
            timeout_s=30,
            what="c1 to hold pending entries",
        )
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait(timeout=10)
        wait_until(lambda: client.xlen(names.results) >= total, timeout_s=90, what="all results")
        wait_until(
            lambda: client.xinfo_groups(names.requests)[0]["pending"] == 0,
            timeout_s=30,
            what="no pending entries",
        )
        ids = [fields[b"id"] for _id, fields in entries(client.xrange(names.results))]
        assert len(ids) == total  # none duplicated...
        assert set(ids) == {f"r{i}".encode() for i in range(total)}  # ...none lost
        for _id, fields in entries(client.xrange(names.results)):
            assert fields[b"status"] == b"200"
        second.proc.send_signal(signal.SIGTERM)
        assert second.proc.wait(timeout=25) == 0
        assert second.saw("claimed idle entries")
    finally:
        first.stop()
        second.stop()


def test_the_password_is_read_from_a_mounted_secret_file(repository: Path, tmp_path: Path) -> None:
    """What the rendered Deployment does: the Secret's key mounted as a file (ending in a
    newline, as `kubectl create secret --from-file` often leaves it), given with
    --redis-password-file, against a redis-server that requires it."""
    secret = tmp_path / "secret" / "password"
    secret.parent.mkdir()
    secret.write_text("s3cret pass\n")
    names = fresh_names()
    with (
        redis_server(password="s3cret pass") as server,
        redis.Redis.from_url(server.url, password="s3cret pass") as client,
    ):
        proc = ConsumerProcess(server.url, names, repository, "--redis-password-file", str(secret))
        try:
            proc.wait_consuming()
            client.xadd(names.requests, {"id": "p1", "model": "slow", "body": _body(1)})
            wait_until(lambda: client.xlen(names.results) == 1, timeout_s=30, what="the result")
            ((_id, fields),) = entries(client.xrange(names.results))
            assert (fields[b"id"], fields[b"status"]) == (b"p1", b"200")
        finally:
            proc.stop()


def test_an_unreadable_password_file_is_refused(tmp_path: Path) -> None:
    from podserve.cli.main import main

    iris = Path(__file__).resolve().parents[2] / "examples" / "models" / "iris"
    argv = ["consume", "--redis", "redis://127.0.0.1:1/0", "--stream", "s", "--group", "g"]
    argv += ["--results-stream", "r", "--model", f"iris={iris}"]
    argv += ["--redis-password-file", str(tmp_path / "absent")]
    assert main(argv) == 2
