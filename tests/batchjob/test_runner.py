"""The job loop end to end, in process, on the real example models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from podserve.batchjob import JobSpec, LoadedModel, Snapshot, read_checkpoint, run_job
from tests.batchjob.support import iris_rows, jsonl_line, load_example, read_jsonl, write_jsonl


class Recorder:
    """A reporter that keeps what it is told; `crash_after` chunks it raises, as a kill
    right after a checkpoint would stop the job."""

    def __init__(self, crash_after: int | None = None) -> None:
        self.crash_after = crash_after
        self.advances: list[Snapshot] = []
        self.started_with: Snapshot | None = None
        self.summary: Snapshot | None = None

    def started(self, snapshot: Snapshot) -> None:
        self.started_with = snapshot

    def advanced(self, snapshot: Snapshot) -> None:
        self.advances.append(snapshot)
        if self.crash_after is not None and len(self.advances) >= self.crash_after:
            raise KeyboardInterrupt("simulated kill")

    def finished(self, snapshot: Snapshot) -> None:
        self.summary = snapshot


@pytest.fixture(scope="module")
def iris() -> LoadedModel:
    return load_example("iris")


@pytest.fixture(scope="module")
def sentiment() -> LoadedModel:
    return load_example("sentiment")


def _spec(tmp_path: Path, input_path: Path, *, name: str = "out", batch: int = 8) -> JobSpec:
    out = tmp_path / f"{name}.jsonl"
    return JobSpec(
        input_path=input_path,
        input_name=str(input_path),
        output_path=out,
        checkpoint_path=out.with_name(out.name + ".checkpoint"),
        batch_size=batch,
    )


def _run(spec: JobSpec, loaded: LoadedModel, reporter: Recorder | None = None) -> Snapshot:
    return run_job(
        spec, model=loaded.model, model_name=loaded.config.name, reporter=reporter or Recorder()
    )


def test_iris_scores_every_line_in_order_like_a_direct_predict(
    tmp_path: Path, iris: LoadedModel
) -> None:
    rows = iris_rows(50)
    spec = _spec(tmp_path, write_jsonl(tmp_path / "in.jsonl", rows), batch=16)
    summary = _run(spec, iris)
    out = read_jsonl(spec.output_path)
    features = np.array([r["inputs"]["features"] for r in rows], dtype=np.float32)
    expected = iris.model.predict({"features": features})["label"].tolist()
    assert [o["id"] for o in out] == list(range(50))
    assert [o["line"] for o in out] == list(range(1, 51))
    assert [o["outputs"] for o in out] == [{"label": label} for label in expected]
    assert (summary.rows, summary.lines, summary.errors) == (50, 50, 0)
    checkpoint = read_checkpoint(spec.checkpoint_path)
    assert checkpoint is not None
    assert checkpoint.complete
    assert checkpoint.output_size_bytes == spec.output_path.stat().st_size


def test_sentiment_bytes_in_bytes_and_floats_out(tmp_path: Path, sentiment: LoadedModel) -> None:
    texts = ["a wonderful, delightful film", "terrible and boring, a waste of time"]
    records: list[dict[str, object]] = [
        {"id": f"r{i}", "inputs": {"text": t}} for i, t in enumerate(texts)
    ]
    spec = _spec(tmp_path, write_jsonl(tmp_path / "in.jsonl", records))
    _run(spec, sentiment)
    out = read_jsonl(spec.output_path)
    labels = [o["outputs"]["label"] for o in out]
    scores = [o["outputs"]["score"] for o in out]
    assert labels == ["positive", "negative"]
    assert scores[0] > 0.5 > scores[1]


def test_bad_lines_get_error_lines_and_their_neighbours_are_scored(
    tmp_path: Path, iris: LoadedModel
) -> None:
    good = iris_rows(4)
    lines = [
        jsonl_line(good[0]),
        b'{"id": "shape", "inputs": {"features": [1.0, 2.0, 3.0]}}\n',
        jsonl_line(good[1]),
        b'{"id": "missing", "inputs": {}}\n',
        b'{"id": "json", "inputs": {"features": [1.0, \n',
        jsonl_line(good[2]),
        b"\n",
        jsonl_line(good[3]),
    ]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(lines))
    spec = _spec(tmp_path, path, batch=64)  # one chunk: the bad lines share a batch
    summary = _run(spec, iris)
    out = read_jsonl(spec.output_path)
    assert [o["line"] for o in out] == [1, 2, 3, 4, 5, 6, 8]
    errors = {o["line"]: o["error"] for o in out if "error" in o}
    assert set(errors) == {2, 4, 5}
    assert "shape [1, 3]" in str(errors[2])
    assert "missing input 'features'" in str(errors[4])
    assert "not valid JSON" in str(errors[5])
    assert [o["id"] for o in out if "outputs" in o] == [0, 1, 2, 3]
    assert summary.errors == 3


def test_a_crash_and_a_half_written_tail_resume_to_identical_output(
    tmp_path: Path, iris: LoadedModel
) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", iris_rows(200))
    reference = _spec(tmp_path, path, name="reference", batch=7)
    _run(reference, iris)

    spec = _spec(tmp_path, path, name="resumed", batch=7)
    with pytest.raises(KeyboardInterrupt):
        _run(spec, iris, Recorder(crash_after=5))
    checkpoint = read_checkpoint(spec.checkpoint_path)
    assert checkpoint is not None
    assert not checkpoint.complete
    assert checkpoint.lines_done == 35
    # What a kill during the next chunk's write leaves behind: bytes past the commit.
    with spec.output_path.open("ab") as out:
        out.write(b'{"id":35,"line":36,"outp')

    again = Recorder()
    summary = _run(spec, iris, again)
    assert again.started_with is not None
    assert again.started_with.total_rows == 35  # resumed, not restarted
    assert summary.rows == 165
    assert summary.total_rows == 200
    assert spec.output_path.read_bytes() == reference.output_path.read_bytes()


def test_running_a_finished_job_again_changes_nothing(tmp_path: Path, iris: LoadedModel) -> None:
    spec = _spec(tmp_path, write_jsonl(tmp_path / "in.jsonl", iris_rows(20)))
    _run(spec, iris)
    before = spec.output_path.read_bytes()
    summary = _run(spec, iris)
    assert summary.rows == 0
    assert summary.total_rows == 20
    assert spec.output_path.read_bytes() == before


def test_restart_starts_over(tmp_path: Path, iris: LoadedModel) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", iris_rows(20))
    spec = _spec(tmp_path, path)
    _run(spec, iris)
    before = spec.output_path.read_bytes()
    restarted = JobSpec(
        input_path=spec.input_path,
        input_name=spec.input_name,
        output_path=spec.output_path,
        checkpoint_path=spec.checkpoint_path,
        batch_size=spec.batch_size,
        restart=True,
    )
    assert _run(restarted, iris).rows == 20
    assert spec.output_path.read_bytes() == before
