"""`podserve batch` as a process: kill -9 halfway and resume, URI input, exit codes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from podserve.batchjob import Checkpoint, read_checkpoint
from podserve.cli.main import main
from tests.batchjob.support import IRIS, iris_rows, read_jsonl, write_jsonl


def _argv(input_arg: str, output: Path, *extra: str) -> list[str]:
    return [
        "batch",
        "--model-dir",
        str(IRIS),
        "--input",
        input_arg,
        "--output",
        str(output),
        "--cache-dir",
        str(output.parent / "cache"),
        *extra,
    ]


def _spawn(argv: list[str], *, stderr: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "podserve.cli.main", *argv],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )


def _wait_for_progress(path: Path, proc: subprocess.Popen[bytes], timeout_s: float) -> Checkpoint:
    """Poll the checkpoint until it records committed lines but not the end (bounded)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the job ended before it could be interrupted"
        # No try/except: the checkpoint is replaced atomically, so a reader never sees
        # it half-written; an error here is a bug this test should report.
        checkpoint = read_checkpoint(path)
        if checkpoint is not None and checkpoint.lines_done > 0:
            return checkpoint
        time.sleep(0.005)
    raise AssertionError(f"no progress in {path} within {timeout_s} s")


@pytest.mark.slow
def test_kill_9_halfway_then_restart_gives_the_uninterrupted_output(tmp_path: Path) -> None:
    count = 20_000
    source = write_jsonl(tmp_path / "in.jsonl", iris_rows(count))
    reference = tmp_path / "reference.jsonl"
    assert main(_argv(str(source), reference, "--batch-size", "32", "--progress", "none")) == 0

    output = tmp_path / "out.jsonl"
    argv = _argv(str(source), output, "--batch-size", "32", "--progress", "json")
    proc = _spawn(argv, stderr=subprocess.DEVNULL)
    try:
        before = _wait_for_progress(Path(f"{output}.checkpoint"), proc, timeout_s=60)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    killed_at = read_checkpoint(Path(f"{output}.checkpoint"))
    assert killed_at is not None
    assert before.lines_done <= killed_at.lines_done < count
    assert not killed_at.complete

    second = _spawn(argv, stderr=subprocess.PIPE)
    _, stderr = second.communicate(timeout=120)
    assert second.returncode == 0, stderr.decode()
    events = [orjson.loads(line) for line in stderr.splitlines() if line.startswith(b"{")]
    assert events[0]["event"] == "started"
    assert events[0]["total_rows"] == killed_at.rows_done > 0  # it resumed
    assert events[-1]["event"] == "summary"
    assert events[-1]["total_rows"] == count

    out = read_jsonl(output)
    assert [o["id"] for o in out] == list(range(count))  # each id once, in order
    assert output.read_bytes() == reference.read_bytes()


def test_file_uri_input_and_error_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = [*iris_rows(3), {"id": "bad", "inputs": {"features": [1.0]}}]
    source = write_jsonl(tmp_path / "in.jsonl", records)
    output = tmp_path / "out.jsonl"
    code = main(_argv(source.as_uri(), output, "--progress", "none"))
    assert code == 0
    out = read_jsonl(output)
    assert [o["id"] for o in out] == [0, 1, 2, "bad"]
    assert "error" in out[3]
    stderr = capsys.readouterr().err
    assert "4 rows in 4 lines, 1 errors" in stderr
    assert "1 line(s) had errors" in stderr


def test_model_uri_with_a_wrong_digest_is_fatal(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", iris_rows(2))
    argv = _argv(str(source), tmp_path / "out.jsonl")
    argv[1:3] = ["--model", str(IRIS), "--digest", "sha256:" + "0" * 64]
    assert main(argv) == 1


def test_a_model_uri_loads_like_a_model_dir(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", iris_rows(5))
    argv = _argv(str(source), tmp_path / "out.jsonl", "--progress", "none")
    argv[1:3] = ["--model", IRIS.as_uri()]
    assert main(argv) == 0
    assert len(read_jsonl(tmp_path / "out.jsonl")) == 5


def test_unreadable_model_and_missing_input_are_fatal(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    missing_model = ["batch", "--model-dir", str(tmp_path), "--input", "x", "--output", str(output)]
    assert main(missing_model) == 1
    assert main(_argv(str(tmp_path / "nope.jsonl"), output)) == 1


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(_argv("in.jsonl", tmp_path / "out.jsonl", "--batch-size", "0"))
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["batch", "--input", "in.jsonl", "--output", str(tmp_path / "o")])
    assert exc.value.code == 2
    digest_without_uri = [*_argv("in.jsonl", tmp_path / "out.jsonl"), "--digest", "sha256:00"]
    assert main(digest_without_uri) == 2
