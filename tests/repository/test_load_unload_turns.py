"""Loads and unloads of one model take turns, in arrival order, and finish even when their
caller stops waiting: the state after them is what the last request asked for, and every
worker made is closed once it is replaced. Loads go through the real load path (the fake
runtime, or custom code whose load the test holds); only the worker is a stub, so the test
sets when a request in flight ends."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from podserve.core.clock import FakeClock
from podserve.repository import ModelRepository, ModelState, RepositoryPolicy, discover_models
from tests.lifecycle.stub_worker import StubWorker
from tests.support.server import write_model

WAITING = "waiting for the model's load or unload in progress"

# A load that goes on only once the test creates `go` next to model.yaml (the loader
# thread polls for it: nothing else can reach into that thread).
HELD_LOAD = """
import time
from podserve.runtimes import ModelAPI

class HeldLoad(ModelAPI):
    def load(self, context):
        started = context.directory / "started"
        started.write_text("")
        while not (context.directory / "go").exists():
            time.sleep(0.005)

    def predict(self, batch):
        return {"y": batch["x"]}
"""


class Workers:
    """The worker factory: every worker the repository made, in order."""

    def __init__(self) -> None:
        self.made: list[StubWorker] = []

    def __call__(self, config: object, model: object) -> StubWorker:
        worker = StubWorker(getattr(config, "name", "?"))
        self.made.append(worker)
        return worker

    def leaked(self, current: object) -> list[StubWorker]:
        """Workers neither closed nor serving now."""
        return [w for w in self.made if not w.closed and w is not current]


def held_model(tmp_path: Path) -> Path:
    """Model `m`, whose load waits for a file `go` in its directory (after writing
    `started`), written under tmp_path/models; its directory."""
    directory = write_model(
        tmp_path / "models",
        "m",
        runtime="custom",
        model_class="held:HeldLoad",
        warmup=False,
        preload=False,
    )
    (directory / "held.py").write_text(HELD_LOAD)
    return directory


def make(root: Path) -> tuple[ModelRepository, Workers]:
    workers = Workers()
    repository = ModelRepository(
        discover_models(root / "models", []),
        worker_factory=workers,
        clock=FakeClock(),
        policy=RepositoryPolicy(cache_dir=root / "cache"),
    )
    return repository, workers


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    """Poll a real condition while the event loop runs the tasks under test."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def waited(caplog: pytest.LogCaptureFixture, action: str) -> Callable[[], bool]:
    """Whether the repository logged that an `action` waits for the model's turn."""
    return lambda: any(
        r.getMessage() == WAITING and getattr(r, "action", None) == action for r in caplog.records
    )


@pytest.fixture(autouse=True)
def _capture_repository_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="podserve.repository")


async def test_a_load_sent_during_an_unload_waits_for_it_then_loads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_model(tmp_path / "models", "m", warmup=False, preload=False)
    repository, workers = make(tmp_path)
    await repository.load("m")
    first = workers.made[0]
    first.inflight = 1  # a request in flight: the unload waits for it
    first.idle.clear()
    unload = asyncio.ensure_future(repository.unload("m"))
    await until(lambda: repository.entry("m").state is ModelState.UNLOADING, "UNLOADING")
    load = asyncio.ensure_future(repository.load("m"))
    await until(lambda: load.done() or waited(caplog, "load")(), "the load to wait or end")
    assert not load.done(), "the load answered while the unload still held the model"
    assert repository.entry("m").state is ModelState.UNLOADING

    first.inflight = 0  # the request in flight ends
    first.idle.set()
    await asyncio.gather(unload, load)

    entry = repository.entry("m")
    assert entry.state is ModelState.READY  # the last request was the load
    assert len(workers.made) == 2
    assert entry.worker is workers.made[1]
    assert first.closed
    assert workers.leaked(entry.worker) == []


async def test_an_unload_sent_during_a_load_waits_for_it_then_unloads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = held_model(tmp_path)
    repository, workers = make(tmp_path)
    load = asyncio.ensure_future(repository.load("m"))
    await until(lambda: (directory / "started").exists(), "the load to start")
    unload = asyncio.ensure_future(repository.unload("m"))
    await until(lambda: unload.done() or waited(caplog, "unload")(), "the unload to wait or end")
    assert not unload.done(), "the unload answered while the model was still loading"

    (directory / "go").write_text("")
    await asyncio.gather(load, unload)

    entry = repository.entry("m")
    assert entry.state is ModelState.UNAVAILABLE  # the last request was the unload
    assert entry.worker is None
    assert len(workers.made) == 1
    assert workers.leaked(None) == []


async def test_a_load_waits_for_an_unload_of_every_version_still_draining_an_older_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "models"
    write_model(root, "m", warmup=False, preload=False)
    for version in ("1", "2"):
        (root / "m" / version).mkdir()
    repository, workers = make(tmp_path)
    await repository.load("m", "1")
    await repository.load("m", "2")
    old = workers.made[0]
    old.inflight = 1  # version 1 drains first; version 2 is still READY meanwhile
    old.idle.clear()
    unload = asyncio.ensure_future(repository.unload("m"))
    await until(lambda: repository.entry("m", "1").state is ModelState.UNLOADING, "UNLOADING")
    assert repository.entry("m", "2").state is ModelState.READY
    load = asyncio.ensure_future(repository.load("m"))  # the latest: version 2
    await until(lambda: load.done() or waited(caplog, "load")(), "the load to wait or end")
    assert not load.done(), "the load found version 2 READY and answered before the unload"

    old.inflight = 0
    old.idle.set()
    await asyncio.gather(unload, load)

    assert repository.entry("m", "1").state is ModelState.UNAVAILABLE
    latest = repository.entry("m", "2")
    assert latest.state is ModelState.READY
    assert latest.worker is workers.made[2]  # loaded again after the unload
    assert workers.leaked(latest.worker) == []


async def test_a_load_whose_caller_stops_waiting_still_finishes(tmp_path: Path) -> None:
    directory = held_model(tmp_path)
    repository, workers = make(tmp_path)
    caller = asyncio.ensure_future(repository.load("m"))
    await until(lambda: (directory / "started").exists(), "the load to start")
    caller.cancel()  # a gRPC deadline, say
    with pytest.raises(asyncio.CancelledError):
        await caller

    (directory / "go").write_text("")
    await until(lambda: repository.entry("m").state is ModelState.READY, "READY")
    assert repository.entry("m").worker is workers.made[0]
    # The model's lock is free again: an unload now runs at once.
    await repository.unload("m")
    assert workers.made[0].closed


async def test_an_unload_whose_caller_stops_waiting_still_finishes(tmp_path: Path) -> None:
    write_model(tmp_path / "models", "m", warmup=False, preload=False)
    repository, workers = make(tmp_path)
    await repository.load("m")
    worker = workers.made[0]
    worker.inflight = 1
    worker.idle.clear()
    caller = asyncio.ensure_future(repository.unload("m"))
    await until(lambda: repository.entry("m").state is ModelState.UNLOADING, "UNLOADING")
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller

    worker.inflight = 0
    worker.idle.set()
    await until(lambda: repository.entry("m").state is ModelState.UNAVAILABLE, "UNAVAILABLE")
    assert worker.closed
    assert repository.entry("m").worker is None
