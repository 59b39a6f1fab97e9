"""Loads run on a thread that ends with them (repository/load_thread.py): a thread that ran
the warm-up must not outlive the load, or libgomp keeps its OpenMP team and throttles the
serving thread's (issue 16: W2 at concurrency 1 was 25% slower than the raw call)."""

from __future__ import annotations

import asyncio
import shutil
import threading
from pathlib import Path

import pytest

from podserve.config.model_config import ModelConfig
from podserve.core.clock import FakeClock
from podserve.generation.registry import EngineServices
from podserve.repository import ModelRepository, RepositoryPolicy, discover_models
from podserve.repository import repository as repository_module
from podserve.repository.load_thread import run_on_own_thread
from podserve.repository.loading import load_and_warm
from tests.lifecycle.stub_worker import StubWorker

REPO_ROOT = Path(__file__).resolve().parents[2]


async def test_the_result_comes_back_from_a_thread_that_then_ends() -> None:
    ran_on: list[threading.Thread] = []

    def work(x: int) -> int:
        ran_on.append(threading.current_thread())
        return x * 2

    assert await run_on_own_thread("podserve-load-test", work, 21) == 42
    (thread,) = ran_on
    assert thread is not threading.main_thread()
    assert thread.name == "podserve-load-test"
    thread.join(timeout=5)
    assert not thread.is_alive()


async def test_an_error_in_the_load_reaches_the_caller() -> None:
    def fail() -> None:
        raise ValueError("bad weights")

    with pytest.raises(ValueError, match="bad weights"):
        await run_on_own_thread("podserve-load-test", fail)


async def test_a_cancelled_caller_leaves_the_load_to_finish_quietly() -> None:
    release = threading.Event()
    finished = threading.Event()

    def slow() -> int:
        release.wait(5)
        finished.set()
        return 1

    task = asyncio.create_task(run_on_own_thread("podserve-load-test", slow))
    await asyncio.sleep(0)  # let the thread start
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    assert await asyncio.to_thread(finished.wait, 5)
    await asyncio.sleep(0.05)  # the late result is dropped on the loop, without an error


async def test_the_thread_that_warmed_a_torch_model_up_is_gone_after_the_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """all-MiniLM-L6-v2 with its warm-up, through the repository's real load path. With
    `asyncio.to_thread` the warm-up's thread was an executor thread that lived on, and
    with it the OpenMP team it made."""
    pytest.importorskip("torch", reason="the embedding runtime needs torch (podserve[llm])")
    shutil.copytree(REPO_ROOT / "examples" / "models" / "minilm", tmp_path / "models" / "minilm")
    warmed_on: list[threading.Thread] = []

    def recording(config: ModelConfig, engines: EngineServices | None) -> object:
        warmed_on.append(threading.current_thread())
        return load_and_warm(config, engines)

    monkeypatch.setattr(repository_module, "load_and_warm", recording)
    repository = ModelRepository(
        discover_models(tmp_path / "models", []),
        worker_factory=lambda config, model: StubWorker(config.name),
        clock=FakeClock(),
        policy=RepositoryPolicy(cache_dir=tmp_path / "cache"),
    )
    await repository.load("minilm")
    (thread,) = warmed_on
    assert thread is not threading.main_thread()
    thread.join(timeout=10)
    assert not thread.is_alive()
