"""What each probe means (DESIGN.md §2), from the lifecycle's own state and the Worker
protocol, on a fake clock: no server, no model, no sleeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from podserve.config.model_config import ModelConfig
from podserve.core.clock import FakeClock
from podserve.lifecycle import Lifecycle, State
from podserve.repository import ModelRepository, ModelState, RepositoryPolicy
from tests.lifecycle.stub_worker import StubWorker


def make(tmp_path: Path, *names: str) -> tuple[Lifecycle, ModelRepository, FakeClock]:
    clock = FakeClock()
    configs = [ModelConfig(name=n, runtime="fake") for n in names]
    repository = ModelRepository(
        configs,
        worker_factory=lambda config, model: StubWorker(config.name),
        clock=clock,
        policy=RepositoryPolicy(cache_dir=tmp_path),
    )
    return Lifecycle(repository, clock, load_stall_timeout_s=60), repository, clock


def serve(repository: ModelRepository, name: str) -> StubWorker:
    """Mark a model loaded with a stub worker, as a finished load leaves it."""
    worker = StubWorker(name)
    entry = repository.entry(name)
    entry.worker, entry.state = worker, ModelState.READY
    return worker


def test_states_from_starting_to_stopped(tmp_path: Path) -> None:
    lifecycle, repository, _ = make(tmp_path, "a")
    states = [lifecycle.state]
    repository.entry("a").state = ModelState.LOADING
    states.append(lifecycle.state)
    assert not lifecycle.startup().ok
    serve(repository, "a")
    lifecycle.loading_finished()
    states.append(lifecycle.state)
    startup = lifecycle.startup()
    assert startup.ok
    assert startup.details["progress"] == "1/1"
    lifecycle.begin_drain()
    states.append(lifecycle.state)
    lifecycle.stop()
    states.append(lifecycle.state)
    assert states == [State.STARTING, State.LOADING, State.READY, State.DRAINING, State.STOPPED]


def test_ready_lists_every_failing_reason(tmp_path: Path) -> None:
    lifecycle, repository, _ = make(tmp_path, "a", "b")
    worker = serve(repository, "a")
    failed = repository.entry("b")
    failed.state, failed.error = ModelState.FAILED, "weights missing"
    lifecycle.loading_finished()
    worker.saturated, worker.queue_depth = True, 9
    worker.last_device_error = "CUDA error: an illegal memory access"
    report = lifecycle.ready()
    assert not report.ok
    assert lifecycle.state is State.DEGRADED
    reasons = " | ".join(report.reasons)
    assert "model 'b' failed to load: weights missing" in reasons
    assert "queue is above its high watermark (9/10)" in reasons
    assert "illegal memory access" in reasons
    worker.saturated, worker.last_device_error = False, None
    failed.state = ModelState.UNAVAILABLE
    assert lifecycle.ready().ok
    lifecycle.begin_drain()
    assert lifecycle.ready().reasons == ("draining after SIGTERM",)


def test_liveness_watches_wedged_workers_and_stalled_loading(tmp_path: Path) -> None:
    lifecycle, repository, clock = make(tmp_path, "a")
    assert lifecycle.live().ok  # loading, progress just now
    clock.advance(61)
    stalled = lifecycle.live()
    assert not stalled.ok
    assert "no progress for 61s" in stalled.reasons[0]
    worker = serve(repository, "a")
    lifecycle.loading_finished()
    assert lifecycle.live().ok  # loading is over: its stall no longer matters
    worker.busy_s = 5.5  # a batch over its max_batch_time_s of 5
    wedged = lifecycle.live()
    assert not wedged.ok
    assert "worker is wedged" in wedged.reasons[0]
    # busy is not wedged: liveness never depends on load
    worker.busy_s, worker.inflight, worker.saturated = 4.9, 100, True
    assert lifecycle.live().ok


async def test_in_flight_accounting_is_what_the_drain_waits_for(tmp_path: Path) -> None:
    lifecycle, _, _ = make(tmp_path)
    await lifecycle.wait_empty()  # nothing in flight: returns at once
    lifecycle.request_started()
    lifecycle.request_started()
    assert lifecycle.inflight == 2
    lifecycle.request_finished()
    assert lifecycle.inflight == 1
    lifecycle.request_finished()
    await lifecycle.wait_empty()
    assert lifecycle.inflight == 0


@pytest.mark.parametrize("preload", [True, False])
def test_startup_counts_only_preload_models(tmp_path: Path, preload: bool) -> None:
    clock = FakeClock()
    repository = ModelRepository(
        [ModelConfig(name="a", runtime="fake", preload=preload)],
        worker_factory=lambda config, model: StubWorker(config.name),
        clock=clock,
        policy=RepositoryPolicy(cache_dir=tmp_path),
    )
    lifecycle = Lifecycle(repository, clock, load_stall_timeout_s=60)
    lifecycle.loading_finished()
    assert lifecycle.startup().ok is (not preload)
