from __future__ import annotations

import io
import os
import pty
from pathlib import Path

import orjson
from rich.console import Console

from podserve.core.clock import FakeClock
from podserve.storage import Phase
from podserve.storage.progress import JsonLinesProgress, RichProgress, progress_for
from tests.obs.tty import clean_env, run_with_tty_stderr
from tests.storage.support import ServerState


def test_json_lines_are_throttled_per_file() -> None:
    out = io.StringIO()
    clock = FakeClock()
    p = JsonLinesProgress(out, interval_s=1.0, clock=clock, wall=lambda: 1_800_000_000.25)
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
    assert lines[2] == {
        "ts": "2027-01-15T08:00:00.250Z",
        "level": "info",
        "logger": "podserve.fetch",
        "msg": "progress",
        "event": "progress",
        "file": "w.bin",
        "done_bytes": 70,
        "total_bytes": 100,
    }
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


def test_auto_draws_a_bar_on_a_terminal_unless_json_logs_are_asked_for() -> None:
    master, slave = pty.openpty()
    try:
        with open(slave, "w", closefd=False) as terminal:
            bar = progress_for("auto", terminal)
            assert isinstance(bar, RichProgress)
            bar.close()
            assert isinstance(progress_for("auto", terminal, log_format="json"), JsonLinesProgress)
            assert isinstance(progress_for("auto", terminal, log_format="console"), RichProgress)
    finally:
        os.close(slave)
        os.close(master)


def test_fetch_on_a_tty_with_json_logs_writes_only_json_log_lines(
    http_server: tuple[str, ServerState], tmp_path: Path
) -> None:
    """`podserve fetch` as an init container started with `tty: true` runs it."""
    base, state = http_server
    state.put("/m.bin", b"weights" * 50_000)
    argv = ["-m", "podserve.cli.main", "fetch", f"{base}/m.bin", "--cache-dir", str(tmp_path)]
    code, out, err = run_with_tty_stderr(argv, clean_env(PODSERVE_LOG_FORMAT="json"))
    assert code == 0, err
    assert Path(out.strip(), "m.bin").is_file()
    records = [orjson.loads(line) for line in err.splitlines()]  # each line is JSON
    assert {r["logger"] for r in records} == {"podserve.fetch"}
    assert all({"ts", "level", "msg", "event"} <= set(r) for r in records)
    assert records[-1]["event"] == "published"

    # The same on a terminal without JSON logs is a bar for a person (not JSON).
    state.put("/n.bin", b"weights" * 50_000)
    argv[3] = f"{base}/n.bin"
    code, _, err = run_with_tty_stderr(argv, clean_env())
    assert code == 0, err
    assert "\x1b[" in err  # the terminal bar's escape codes
    assert "downloading" in err


def test_fetch_errors_are_json_log_lines(tmp_path: Path) -> None:
    argv = ["-m", "podserve.cli.main", "fetch", str(tmp_path / "absent"), "--cache-dir", "c"]
    code, _, err = run_with_tty_stderr(argv, clean_env(PODSERVE_LOG_FORMAT="json"))
    assert code == 3
    (record,) = [orjson.loads(line) for line in err.splitlines()]
    assert record["level"] == "error"
    assert record["event"] == "error"
    assert record["exit_code"] == 3
    assert "absent" in record["msg"]
