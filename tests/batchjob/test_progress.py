"""Progress reporters: throttled JSON lines on a fake clock, the summary line."""

from __future__ import annotations

import io
import os
import pty
from pathlib import Path

import orjson

from podserve.batchjob import JsonLinesReporter, Snapshot, SummaryOnly, reporter_for, summary_text
from podserve.batchjob.progress import RichReporter
from podserve.core.clock import FakeClock
from tests.batchjob.support import IRIS, iris_rows, write_jsonl
from tests.obs.tty import clean_env, run_with_tty_stderr


def _snapshot(rows: int, seconds: float, *, total_rows: int | None = None) -> Snapshot:
    return Snapshot(
        rows=rows,
        lines=rows,
        errors=1,
        seconds=seconds,
        total_rows=rows if total_rows is None else total_rows,
        total_errors=1,
        input_done_bytes=rows * 10,
        input_size_bytes=1000,
    )


def test_json_lines_are_throttled_to_the_interval() -> None:
    stream = io.StringIO()
    clock = FakeClock()
    reporter = JsonLinesReporter(stream, interval_s=5.0, clock=clock)
    reporter.started(_snapshot(0, 0.0))
    for step in range(1, 21):
        clock.advance(1.0)
        reporter.advanced(_snapshot(step * 10, float(step)))
    reporter.finished(_snapshot(200, 20.0))
    events = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    assert [e["event"] for e in events] == ["started"] + ["progress"] * 4 + ["summary"]
    assert [e["rows"] for e in events[1:5]] == [50, 100, 150, 200]
    assert events[-1]["rows_per_s"] == 10.0
    assert events[-1]["errors"] == 1


def test_summary_names_rows_errors_seconds_rate_and_earlier_runs() -> None:
    text = summary_text(_snapshot(1000, 2.0, total_rows=1500))
    assert text == (
        "podserve batch: 1,000 rows in 1,000 lines, 1 errors, 2.00 s, 500.0 rows/s "
        "(+500 rows from earlier runs)"
    )


def test_none_still_prints_the_summary_and_auto_is_json_off_a_terminal() -> None:
    stream = io.StringIO()
    quiet = reporter_for("none", stream)
    assert isinstance(quiet, SummaryOnly)
    quiet.advanced(_snapshot(1, 1.0))
    quiet.finished(_snapshot(2, 1.0))
    assert stream.getvalue() == summary_text(_snapshot(2, 1.0)) + "\n"
    assert isinstance(reporter_for("auto", io.StringIO()), JsonLinesReporter)


def test_json_lines_have_the_log_shape() -> None:
    stream = io.StringIO()
    reporter = JsonLinesReporter(stream, clock=FakeClock(), wall=lambda: 1_800_000_000.0)
    reporter.started(_snapshot(0, 0.0))
    reporter.finished(_snapshot(200, 20.0))
    started, summary = (orjson.loads(line) for line in stream.getvalue().splitlines())
    assert started["ts"] == "2027-01-15T08:00:00.000Z"
    assert (started["level"], started["logger"], started["msg"]) == (
        "info",
        "podserve.batch",
        "batch started",
    )
    assert summary["msg"] == summary_text(_snapshot(200, 20.0))


def test_auto_draws_a_bar_on_a_terminal_unless_json_logs_are_asked_for() -> None:
    master, slave = pty.openpty()
    try:
        with open(slave, "w", closefd=False) as terminal:
            assert isinstance(reporter_for("auto", terminal), RichReporter)
            assert isinstance(reporter_for("auto", terminal, log_format="json"), JsonLinesReporter)
    finally:
        os.close(slave)
        os.close(master)


def test_batch_on_a_tty_with_json_logs_writes_only_json_log_lines(tmp_path: Path) -> None:
    """`podserve batch` as a Job container started with `tty: true` runs it."""
    rows = [*iris_rows(40), {"id": "bad", "inputs": {"features": [1.0]}}]
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    argv = ["-m", "podserve.cli.main", "batch", "--model-dir", str(IRIS), "--input", str(source)]
    argv += ["--output", str(tmp_path / "out.jsonl"), "--cache-dir", str(tmp_path / "c")]
    code, _, err = run_with_tty_stderr(argv, clean_env(PODSERVE_LOG_FORMAT="json"))
    assert code == 0, err
    records = [orjson.loads(line) for line in err.splitlines()]  # each line is JSON
    assert next(r["event"] for r in records) == "started"
    assert records[-2]["event"] == "summary"
    assert records[-1]["level"] == "warning"
    assert "1 line(s) had errors" in records[-1]["msg"]

    code, _, err = run_with_tty_stderr([*argv, "--restart"], clean_env())
    assert code == 0, err
    assert "\x1b[" in err  # a bar for a person on a terminal
