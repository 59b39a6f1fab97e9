"""Progress reporters: throttled JSON lines on a fake clock, the summary line."""

from __future__ import annotations

import io

import orjson

from podserve.batchjob import JsonLinesReporter, Snapshot, SummaryOnly, reporter_for, summary_text
from podserve.core.clock import FakeClock


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
