"""The repository's memory budget with least-recently-used unloading (ModelMesh-style
density), on a fake clock with stub workers: loads go through the real load path (the
fake runtime) and the real budget decisions; only the worker is a stub."""

from __future__ import annotations

from pathlib import Path

import pytest

from podserve.core.clock import FakeClock
from podserve.core.errors import Unavailable
from podserve.repository import ModelRepository, ModelState, RepositoryPolicy, discover_models
from tests.lifecycle.stub_worker import StubWorker
from tests.support.server import write_model

MODEL_BYTES = 100


def make(
    tmp_path: Path, budget: int, *names: str, big: str = ""
) -> tuple[ModelRepository, FakeClock]:
    for name in names:
        write_model(
            tmp_path / "models", name, warmup=False, preload=False, memory_bytes=MODEL_BYTES
        )
    if big:
        write_model(tmp_path / "models", big, warmup=False, preload=False, memory_bytes=10_000)
    clock = FakeClock()
    repository = ModelRepository(
        discover_models(tmp_path / "models", []),
        worker_factory=lambda config, model: StubWorker(config.name),
        clock=clock,
        policy=RepositoryPolicy(cache_dir=tmp_path / "cache", memory_budget_bytes=budget),
    )
    return repository, clock


def use(repository: ModelRepository, clock: FakeClock, name: str) -> StubWorker:
    clock.advance(1)
    worker = repository.worker(name)  # a request: marks the model used now
    assert isinstance(worker, StubWorker)
    return worker


def loaded(repository: ModelRepository) -> list[str]:
    return [e.name for e in repository.entries() if e.state is ModelState.READY]


async def test_loading_past_the_budget_unloads_the_least_recently_used(tmp_path: Path) -> None:
    repository, clock = make(tmp_path, 250, "a", "b", "c")
    await repository.load("a")
    await repository.load("b")
    use(repository, clock, "b")
    use(repository, clock, "a")  # b is now the least recently used
    await repository.load("c")
    assert loaded(repository) == ["a", "c"]
    assert repository.used_bytes() == 2 * MODEL_BYTES
    assert repository.entry("b").state is ModelState.UNAVAILABLE


async def test_a_model_with_requests_in_flight_is_never_unloaded(tmp_path: Path) -> None:
    repository, clock = make(tmp_path, 250, "a", "b", "c")
    await repository.load("a")
    await repository.load("b")
    use(repository, clock, "b").inflight = 1  # b is older but busy
    use(repository, clock, "a")
    await repository.load("c")
    assert loaded(repository) == ["b", "c"]


async def test_when_nothing_can_go_the_load_is_a_503(tmp_path: Path) -> None:
    repository, clock = make(tmp_path, 250, "a", "b", "c", big="huge")
    await repository.load("a")
    await repository.load("b")
    use(repository, clock, "a").inflight = 1
    use(repository, clock, "b").inflight = 1
    with pytest.raises(Unavailable, match="does not fit the memory budget") as busy:
        await repository.load("c")
    assert busy.value.reason == "memory_budget"
    assert repository.entry("c").state is ModelState.UNAVAILABLE
    with pytest.raises(Unavailable, match="more than the whole memory budget of 250 bytes"):
        await repository.load("huge")
    assert loaded(repository) == ["a", "b"]  # nothing was evicted for a hopeless load
