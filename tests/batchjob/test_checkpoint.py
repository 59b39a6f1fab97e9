"""Checkpoint files and the rules for resuming from one."""

from __future__ import annotations

from pathlib import Path

import pytest

from podserve.batchjob import Checkpoint, CheckpointError, read_checkpoint, resume_point
from podserve.batchjob.checkpoint import write_checkpoint


def _resume(
    tmp_path: Path,
    *,
    restart: bool = False,
    input_name: str = "in.jsonl",
    input_size_bytes: int = 100,
    model: str = "iris",
) -> Checkpoint:
    return resume_point(
        checkpoint_path=tmp_path / "out.jsonl.checkpoint",
        output_path=tmp_path / "out.jsonl",
        input_name=input_name,
        input_size_bytes=input_size_bytes,
        model=model,
        restart=restart,
    )


def test_first_run_writes_an_empty_checkpoint_before_any_output(tmp_path: Path) -> None:
    first = _resume(tmp_path)
    assert first.lines_done == first.output_size_bytes == 0
    assert read_checkpoint(tmp_path / "out.jsonl.checkpoint") == first


def test_write_replaces_atomically_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    one = Checkpoint(input="i", input_size_bytes=1, model="m", lines_done=1)
    write_checkpoint(path, one)
    write_checkpoint(path, one.model_copy(update={"lines_done": 2}))
    assert read_checkpoint(path) == one.model_copy(update={"lines_done": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cp"]


def test_resume_returns_the_committed_point(tmp_path: Path) -> None:
    _resume(tmp_path)
    committed = Checkpoint(
        input="in.jsonl",
        input_size_bytes=100,
        model="iris",
        lines_done=3,
        input_offset_bytes=40,
        output_size_bytes=5,
    )
    write_checkpoint(tmp_path / "out.jsonl.checkpoint", committed)
    (tmp_path / "out.jsonl").write_bytes(b"12345half-written")
    assert _resume(tmp_path) == committed


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"input_name": "other.jsonl"}, "belongs to another job (input was"),
        ({"model": "sentiment"}, "belongs to another job (model"),
        ({"input_size_bytes": 99}, "belongs to another job (input_size_bytes"),
    ],
)
def test_a_checkpoint_of_another_job_is_refused(
    tmp_path: Path, overrides: dict[str, object], message: str
) -> None:
    _resume(tmp_path)
    with pytest.raises(CheckpointError, match=message.replace("(", r"\(")):
        _resume(tmp_path, **overrides)  # type: ignore[arg-type]  # each case names real kwargs
    restarted = _resume(tmp_path, restart=True, **overrides)  # type: ignore[arg-type]  # as above
    assert restarted.lines_done == 0


def test_output_shorter_than_committed_is_refused(tmp_path: Path) -> None:
    write_checkpoint(
        tmp_path / "out.jsonl.checkpoint",
        Checkpoint(input="in.jsonl", input_size_bytes=100, model="iris", output_size_bytes=10),
    )
    (tmp_path / "out.jsonl").write_bytes(b"12345")
    with pytest.raises(CheckpointError, match="has 5 bytes but"):
        _resume(tmp_path)


def test_output_without_checkpoint_is_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "out.jsonl").write_bytes(b"someone else's results\n")
    with pytest.raises(CheckpointError, match="has no checkpoint"):
        _resume(tmp_path)
    assert _resume(tmp_path, restart=True).output_size_bytes == 0


def test_garbage_checkpoint_is_an_error_not_a_fresh_start(tmp_path: Path) -> None:
    (tmp_path / "out.jsonl.checkpoint").write_text("{not json")
    with pytest.raises(CheckpointError, match="not a valid podserve batch checkpoint"):
        _resume(tmp_path)
