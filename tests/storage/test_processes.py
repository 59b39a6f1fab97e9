"""Real processes sharing one cache, as two pods on a node sharing a hostPath do."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
from pathlib import Path

import orjson
import pytest

from podserve.storage import fetch_model
from tests.storage.support import WAIT_S, ServerState, expected_digest, spawn_fetch, wait_for

pytestmark = pytest.mark.slow

DATA = os.urandom(1 << 20)
DIGEST = expected_digest({"model.bin": DATA})
HELD_BYTES = 256 * 1024


def _stderr_events(proc: subprocess.Popen[str]) -> tuple[queue.Queue[str], threading.Thread]:
    """The `event` of each JSON line the child writes to stderr, as they come."""
    events: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            try:
                events.put(str(orjson.loads(line).get("event")))
            except orjson.JSONDecodeError:
                events.put(line)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return events, thread


def _reap(proc: subprocess.Popen[str] | None) -> None:
    """Kill if still running, and close its pipes (unclosed ones are ResourceWarnings)."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=WAIT_S)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _wait_event(events: queue.Queue[str], wanted: str) -> None:
    seen: list[str] = []
    while True:
        try:
            event = events.get(timeout=WAIT_S)
        except queue.Empty:
            raise AssertionError(f"no {wanted!r} event; saw {seen}") from None
        if event == wanted:
            return
        seen.append(event)


def test_two_processes_download_once(http_server: tuple[str, ServerState], tmp_path: Path) -> None:
    base, state = http_server
    state.put("/model.bin", DATA)
    state.hold_after_bytes = HELD_BYTES
    args = (f"{base}/model.bin", "--digest", DIGEST, "--cache-dir", str(tmp_path))
    first = spawn_fetch(*args)
    second = None
    try:
        assert state.holding.wait(WAIT_S), "the first fetch never started its download"
        second = spawn_fetch(*args)
        # The second blocks on the lock while the first's transfer is held half-way.
        events, pump = _stderr_events(second)
        _wait_event(events, "waiting_for_lock")
        state.release.set()
        out1, err1 = first.communicate(timeout=WAIT_S)
        assert second.wait(timeout=WAIT_S) == 0
        pump.join(WAIT_S)  # stderr is at EOF once the child exited
        assert first.returncode == 0, err1
        assert second.stdout is not None
        out2 = second.stdout.read()
    finally:
        _reap(first)
        _reap(second)
    assert out1 == out2
    assert (Path(out1.strip()) / "model.bin").read_bytes() == DATA
    assert len(state.gets("/model.bin")) == 1


def test_kill_9_mid_download_is_never_served_and_resumes(
    http_server: tuple[str, ServerState], tmp_path: Path
) -> None:
    base, state = http_server
    state.put("/model.bin", DATA)
    state.hold_after_bytes = HELD_BYTES
    url = f"{base}/model.bin"
    proc = spawn_fetch(url, "--digest", DIGEST, "--cache-dir", str(tmp_path))
    try:
        assert state.holding.wait(WAIT_S), "the fetch never started its download"

        def partials() -> list[Path]:
            return list((tmp_path / "tmp").glob("*/state/*.partial"))

        wait_for(
            lambda: any(p.stat().st_size == HELD_BYTES for p in partials()),
            "the held bytes to reach the .partial file",
        )
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=WAIT_S) == -signal.SIGKILL
    finally:
        _reap(proc)
    entries = tmp_path / "entries"
    assert not entries.exists() or [p for p in entries.iterdir() if p.is_dir()] == []
    [partial] = partials()
    assert partial.stat().st_size == HELD_BYTES

    state.hold_after_bytes = None
    state.release.set()
    result = fetch_model(url, digest=DIGEST, cache_dir=tmp_path)
    assert result.lease is not None
    result.lease.release()
    first, resumed = state.gets("/model.bin")
    assert first.range is None
    assert (resumed.range, resumed.status) == (f"bytes={HELD_BYTES}-", 206)
    assert not result.from_cache
    assert (result.path / "model.bin").read_bytes() == DATA
    assert str(result.digest) == DIGEST
