"""A load's or unload's `on_success` is how its outcome is recorded (the data plane's record
of models unloaded on purpose): it runs when the operation succeeds, in the operation's
turn, whether or not its caller still waits, and never for an operation that failed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from podserve.core.errors import ModelLoadFailed
from podserve.repository import ModelState
from tests.repository.test_load_unload_turns import held_model, make, until
from tests.support.server import write_model

FAILING_LOAD = """
from podserve.runtimes import ModelAPI

class FailingLoad(ModelAPI):
    def load(self, context):
        raise RuntimeError("no weights")

    def predict(self, batch):
        return {"y": batch["x"]}
"""


async def test_a_load_cut_short_reports_its_success_when_it_ends(tmp_path: Path) -> None:
    directory = held_model(tmp_path)
    repository, _ = make(tmp_path)
    outcomes: list[str] = []
    caller = asyncio.ensure_future(
        repository.load("m", on_success=lambda: outcomes.append("loaded"))
    )
    await until(lambda: (directory / "started").exists(), "the load to start")
    caller.cancel()  # a gRPC deadline, say
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert outcomes == []

    (directory / "go").write_text("")
    await until(lambda: repository.entry("m").state is ModelState.READY, "READY")
    assert outcomes == ["loaded"]


async def test_outcomes_are_reported_in_the_order_the_operations_took_their_turns(
    tmp_path: Path,
) -> None:
    directory = held_model(tmp_path)
    repository, _ = make(tmp_path)
    outcomes: list[str] = []
    load = asyncio.ensure_future(repository.load("m", on_success=lambda: outcomes.append("loaded")))
    await until(lambda: (directory / "started").exists(), "the load to start")
    unload = asyncio.ensure_future(
        repository.unload("m", on_success=lambda: outcomes.append("unloaded"))
    )
    load.cancel()  # the load's caller leaves; the unload waits for the load's turn to end
    with pytest.raises(asyncio.CancelledError):
        await load

    (directory / "go").write_text("")
    await unload
    # The last request was the unload, and it is what is recorded last.
    assert outcomes == ["loaded", "unloaded"]
    assert repository.entry("m").state is ModelState.UNAVAILABLE


async def test_a_load_that_fails_reports_no_success(tmp_path: Path) -> None:
    directory = write_model(
        tmp_path / "models",
        "m",
        runtime="custom",
        model_class="failing:FailingLoad",
        warmup=False,
        preload=False,
    )
    (directory / "failing.py").write_text(FAILING_LOAD)
    repository, _ = make(tmp_path)
    outcomes: list[str] = []
    with pytest.raises(ModelLoadFailed):
        await repository.load("m", on_success=lambda: outcomes.append("loaded"))
    assert outcomes == []
    assert repository.entry("m").state is ModelState.FAILED


async def test_an_unload_cut_short_reports_its_success_when_it_ends(tmp_path: Path) -> None:
    write_model(tmp_path / "models", "m", warmup=False, preload=False)
    repository, workers = make(tmp_path)
    await repository.load("m")
    worker = workers.made[0]
    worker.inflight = 1  # a request in flight: the unload waits for it
    worker.idle.clear()
    outcomes: list[str] = []
    caller = asyncio.ensure_future(
        repository.unload("m", on_success=lambda: outcomes.append("unloaded"))
    )
    await until(lambda: repository.entry("m").state is ModelState.UNLOADING, "UNLOADING")
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert outcomes == []

    worker.inflight = 0
    worker.idle.set()
    await until(lambda: repository.entry("m").state is ModelState.UNAVAILABLE, "UNAVAILABLE")
    assert outcomes == ["unloaded"]
    assert worker.closed
