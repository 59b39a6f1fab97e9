"""Generation admission on the real tiny LM: limits that can never be met are 400s, a
full waiting queue or too many waiting prompt tokens are 503s with Retry-After."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from podserve.config.model_config import ModelConfig
from podserve.core.clock import MONOTONIC
from podserve.core.errors import InvalidInput, Unavailable

pytest.importorskip("transformers")

from podserve.generation.engine import GenerationEngine
from podserve.generation.executor import ModelExecutor
from podserve.generation.sampling import SamplingParams
from podserve.generation.service import GenerativeLimits, GenerativeWorker
from podserve.obs.metrics import Metrics
from podserve.scheduling import SchedulerConfig

TINY = Path(__file__).resolve().parents[2] / "examples" / "models" / "tiny-lm"


@pytest.fixture
def worker() -> Iterator[GenerativeWorker]:
    executor = ModelExecutor(TINY, max_num_seqs=1, torch_threads=1)
    engine = GenerationEngine(
        executor, SchedulerConfig(max_num_seqs=1, kv_cache_tokens=executor.max_context)
    )
    engine.start()
    worker = GenerativeWorker(
        config=ModelConfig(name="tiny", runtime="transformers"),
        executor=executor,
        engine=engine,
        limits=GenerativeLimits(
            max_queue=1,
            max_tokens_cap=64,
            max_queued_prompt_tokens=40,
            max_batch_time_s=60,
            max_num_seqs=1,
        ),
        metrics=Metrics().for_generation("tiny"),
        clock=MONOTONIC,
    )
    yield worker
    engine.stop()


def test_impossible_requests_are_refused_naming_the_limit(worker: GenerativeWorker) -> None:
    short = worker.executor.encode_prompt("Return")
    with pytest.raises(InvalidInput, match="exceeds this model's limit of 64"):
        worker.check(short, SamplingParams(max_tokens=65))
    long = worker.executor.encode_prompt("word " * 480)
    with pytest.raises(InvalidInput, match="exceeds the model's context of 512 tokens"):
        worker.check(long, SamplingParams(max_tokens=64))


async def test_full_queue_and_queued_prompt_tokens_are_503s(worker: GenerativeWorker) -> None:
    prompt = worker.executor.encode_prompt("The function returns")
    long_params = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)
    running = worker.generate(prompt, long_params)
    first = await anext(running)  # one sequence runs (max_num_seqs=1)
    assert first.token_id is not None
    waiting = worker.generate(prompt, long_params)
    task = asyncio.ensure_future(anext(waiting))  # submits: it waits for the slot
    await asyncio.sleep(0)  # let the task run up to its first wait: submit() is synchronous
    assert worker.engine.stats().num_waiting == 1
    with pytest.raises(Unavailable) as full:
        worker.check(prompt, long_params)
    assert full.value.reason == "queue_full"
    assert full.value.retry_after_s >= 1
    big = worker.executor.encode_prompt("word " * 50)
    worker.limits = GenerativeLimits(
        max_queue=8,
        max_tokens_cap=64,
        max_queued_prompt_tokens=40,
        max_batch_time_s=60,
        max_num_seqs=1,
    )
    with pytest.raises(Unavailable) as tokens:
        worker.check(big, long_params)
    assert tokens.value.reason == "queued_tokens"
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await running.aclose()
    await waiting.aclose()
    assert worker.inflight == 0
