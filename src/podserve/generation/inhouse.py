"""The in-house text engine, runtime `transformers`: a local causal LM driven by the
continuous-batching engine (`generation/engine.py` over `scheduling/`), served through
`GenerativeWorker`. Registered in `generation/registry.py` like any other engine."""

from __future__ import annotations

from podserve.generation.client import EngineClient
from podserve.generation.loading import load_generator
from podserve.generation.registry import EngineContext, TextEngine
from podserve.generation.worker import GenerativeLimits, GenerativeWorker
from podserve.runtimes.parameters import GenerationParameters


def create(context: EngineContext[GenerationParameters]) -> EngineClient:
    config = context.config
    loaded = load_generator(config)
    return GenerativeWorker(
        config=config,
        executor=loaded.executor,
        engine=loaded.engine,
        limits=GenerativeLimits(
            max_queue=context.max_queue,
            max_tokens_cap=loaded.max_tokens_cap,
            max_queued_prompt_tokens=loaded.max_queued_prompt_tokens,
            max_batch_time_s=config.limits.max_batch_time_s,
            max_num_seqs=loaded.max_num_seqs,
        ),
        metrics=context.metrics,
        clock=context.clock,
    )


ENGINE = TextEngine("transformers", GenerationParameters, create)
