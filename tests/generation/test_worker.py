"""Generation admission on the real tiny LM: limits that can never be met are 400s, a
full waiting queue or too many waiting prompt tokens are 503s with Retry-After."""

from __future__ import annotations

import asyncio
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
from podserve.generation.stream import TokenEvent
from podserve.generation.worker import GenerativeLimits, GenerativeWorker
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
    short = worker.encode_prompt("Return")
    with pytest.raises(InvalidInput, match="exceeds this model's limit of 64"):
        worker.check(short, SamplingParams(max_tokens=65))
    long = worker.encode_prompt("word " * 480)
    with pytest.raises(InvalidInput, match="exceeds the model's context of 512 tokens"):
        worker.check(long, SamplingParams(max_tokens=64))


async def test_full_queue_and_queued_prompt_tokens_are_503s(worker: GenerativeWorker) -> None:
    prompt = worker.encode_prompt("The function returns")
    long_params = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)
    (running,) = worker.admit(prompt, [long_params])
    first = await anext(running)  # one sequence runs (max_num_seqs=1)
    assert first.token_id is not None
    # admission is synchronous: the second sequence is in the engine's queue on return
    (waiting,) = worker.admit(prompt, [long_params])
    assert worker.engine.stats().num_waiting == 1
    with pytest.raises(Unavailable) as full:
        worker.admit(prompt, [long_params])
    assert full.value.reason == "queue_full"
    assert full.value.retry_after_s >= 1
    big = worker.encode_prompt("word " * 50)
    worker.limits = GenerativeLimits(
        max_queue=8,
        max_tokens_cap=64,
        max_queued_prompt_tokens=40,
        max_batch_time_s=60,
        max_num_seqs=1,
    )
    with pytest.raises(Unavailable) as tokens:
        worker.admit(big, [long_params])
    assert tokens.value.reason == "queued_tokens"
    running.close()
    waiting.close()
    assert worker.inflight == 0
    assert worker.engine.stats().num_waiting == 0


async def test_n_sequences_are_admitted_all_or_none(worker: GenerativeWorker) -> None:
    """Two sequences where the queue has room for one: neither is submitted, and the
    refusal is raised by `admit` itself, not by a stream that already started."""
    prompt = worker.encode_prompt("The function returns")
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    (running,) = worker.admit(prompt, [params])
    await anext(running)  # it holds the one running slot; the queue (max_queue=1) is empty
    with pytest.raises(Unavailable) as full:
        worker.admit(prompt, [params, params])
    assert full.value.reason == "queue_full"
    assert worker.engine.stats().num_waiting == 0
    assert worker.inflight == 1
    running.close()
    assert worker.inflight == 0


def test_a_prompt_over_the_kv_budget_is_refused_at_admission() -> None:
    """kv_cache_tokens below the context: a prompt the KV budget can never hold is a 400
    from `admit`, before any stream exists (it used to surface inside the stream)."""
    executor = ModelExecutor(TINY, max_num_seqs=1, torch_threads=1)
    engine = GenerationEngine(executor, SchedulerConfig(max_num_seqs=1, kv_cache_tokens=64))
    engine.start()
    try:
        worker = _one_seq_worker(executor, engine, Metrics(), max_tokens_cap=64)
        prompt = worker.encode_prompt("word " * 80)
        with pytest.raises(InvalidInput, match="exceeds the KV cache of 64 tokens"):
            worker.admit(prompt, [SamplingParams(max_tokens=8)])
        assert worker.inflight == 0
        assert engine.stats().num_waiting == 0
    finally:
        engine.stop()


async def test_closing_a_sequence_wakes_its_waiting_reader_and_frees_the_engine() -> None:
    """The `TokenStream` contract a deadline relies on (dataplane/streams.py): `close()`
    from the loop, while a read waits, ends that read with the final "abort" event,
    running or still queued; the engine keeps nothing of either, and the tokens already
    made are counted, as for a client that left."""
    executor = ModelExecutor(TINY, max_num_seqs=1, torch_threads=1)
    engine = GenerationEngine(
        executor, SchedulerConfig(max_num_seqs=1, kv_cache_tokens=executor.max_context)
    )
    engine.start()
    metrics = Metrics()
    try:
        worker = _one_seq_worker(executor, engine, metrics, max_tokens_cap=256)
        prompt = worker.encode_prompt("The function returns")
        long_params = SamplingParams(temperature=0, max_tokens=256, ignore_eos=True)
        running, queued = worker.admit(prompt, [long_params, long_params])
        assert (await anext(running)).token_id is not None
        assert engine.stats().num_waiting == 1  # one KV slot: the second waits its turn
        reads = [asyncio.ensure_future(anext(s)) for s in (running, queued)]
        await asyncio.sleep(0)  # both reads are waiting now
        running.close()
        queued.close()
        events = await asyncio.wait_for(asyncio.gather(*reads), timeout=10)
        # the running one may have had a token in flight; the queued one made none
        assert events[1] == TokenEvent(None, "", "abort")
        assert all(e.finish_reason in (None, "abort") for e in events)
        stats = engine.stats()
        assert (stats.num_running, stats.num_waiting, worker.inflight) == (0, 0, 0)
        assert b'podserve_generation_tokens_total{model="tiny"} ' in metrics.render()
        assert b'podserve_generation_tokens_total{model="tiny"} 0.0' not in metrics.render()
        # the slot is free: the next sequence runs to its end
        (after,) = worker.admit(prompt, [SamplingParams(temperature=0, max_tokens=4)])
        finish = [e.finish_reason async for e in after][-1]
        assert finish in ("stop", "length")
    finally:
        engine.stop()


def _one_seq_worker(
    executor: ModelExecutor, engine: GenerationEngine, metrics: Metrics, max_tokens_cap: int
) -> GenerativeWorker:
    """The tiny model's worker over `engine`, one sequence at a time."""
    return GenerativeWorker(
        config=ModelConfig(name="tiny", runtime="transformers"),
        executor=executor,
        engine=engine,
        limits=GenerativeLimits(
            max_queue=4,
            max_tokens_cap=max_tokens_cap,
            max_queued_prompt_tokens=4096,
            max_batch_time_s=60,
            max_num_seqs=1,
        ),
        metrics=metrics.for_generation("tiny"),
        clock=MONOTONIC,
    )
