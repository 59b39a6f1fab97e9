from __future__ import annotations

import io

import orjson
from rich.console import Console

from podserve.core.clock import FakeClock
from podserve.storage import Phase
from podserve.storage.progress import JsonLinesProgress, RichProgress, progress_for


def test_json_lines_are_throttled_per_file() -> None:
    out = io.StringIO()
    clock = FakeClock()
    p = JsonLinesProgress(out, interval_s=1.0, clock=clock)
    p.phase(Phase.DOWNLOADING, "s3://b/k")
    p.file_started("w.bin", 100, 10)
    for _ in range(5):
        p.file_advanced("w.bin", 10)  # no time passes: no lines
    clock.advance(1.0)
    p.file_advanced("w.bin", 10)
    p.file_finished("w.bin")
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [line["event"] for line in lines] == [
        "downloading",
        "file_started",
        "progress",
        "file_finished",
    ]
    assert lines[1]["resumed_bytes"] == 10
    assert lines[2] == {"event": "progress", "file": "w.bin", "done_bytes": 70, "total_bytes": 100}
    assert lines[3]["done_bytes"] == 70


def test_rich_bar_draws_on_a_terminal() -> None:
    out = io.StringIO()
    p = RichProgress(Console(file=out, force_terminal=True, width=100))
    p.phase(Phase.WAITING_FOR_LOCK, "another process")
    p.file_started("weights.bin", 2048, 0)
    p.file_advanced("weights.bin", 2048)
    p.file_finished("weights.bin")
    p.close()
    text = out.getvalue()
    assert "waiting for lock" in text
    assert "weights.bin" in text
    assert "2.0/2.0 kB" in text


def test_auto_picks_json_off_a_terminal() -> None:
    assert isinstance(progress_for("auto", io.StringIO()), JsonLinesProgress)
