"""Load a generative model (runtime `transformers`): the executor over a local causal-LM
directory and the engine driving it, started and warmed up with one token.

Its model.yaml `parameters:` are `runtimes.parameters.GenerationParameters`, validated
here: an unknown key fails the load naming it (docs/runtimes.md has the table).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from podserve.config.model_config import ModelConfig
from podserve.core.errors import ModelLoadFailed
from podserve.generation.engine import GenerationEngine
from podserve.generation.executor import ModelExecutor
from podserve.generation.sampling import SamplingParams
from podserve.runtimes.parameters import GenerationParameters, validate_parameters
from podserve.scheduling import SchedulerConfig


@dataclass(frozen=True, slots=True)
class LoadedGenerator:
    executor: ModelExecutor
    engine: GenerationEngine
    max_tokens_cap: int
    max_queued_prompt_tokens: int
    max_num_seqs: int


def load_generator(config: ModelConfig) -> LoadedGenerator:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are local; never reach a hub
    params = validate_parameters(
        GenerationParameters, config.parameters, model=config.name, runtime=config.runtime
    )
    directory = config.directory or config.artifact_path()
    max_num_seqs = params.max_num_seqs
    try:
        executor = ModelExecutor(
            directory,
            max_num_seqs=max_num_seqs,
            max_context=params.max_context_tokens,
            torch_threads=params.torch_threads,
        )
    except (OSError, ValueError) as exc:
        raise ModelLoadFailed(f"cannot load a causal LM from {directory}: {exc}") from exc
    context = executor.max_context
    kv_tokens = params.kv_cache_tokens or max_num_seqs * context
    try:
        scheduler = SchedulerConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=params.max_num_batched_tokens or max(512, max_num_seqs),
            kv_cache_tokens=kv_tokens,
            prefill_chunk_tokens=params.prefill_chunk_tokens,
        )
    except ValueError as exc:
        raise ModelLoadFailed(f"model {config.name!r}: bad generation parameters: {exc}") from exc
    try:
        engine = GenerationEngine(executor, scheduler)
    except ValueError as exc:
        raise ModelLoadFailed(f"model {config.name!r}: {exc}") from exc
    engine.start()
    if config.warmup:
        warm = engine.submit(
            "warmup", executor.encode_prompt("Hello"), SamplingParams(temperature=0, max_tokens=1)
        )
        events = list(warm)
        if events[-1].finish_reason in ("error", "abort"):
            engine.stop()
            raise ModelLoadFailed(f"model {config.name!r}: warm-up generation failed")
    return LoadedGenerator(
        executor=executor,
        engine=engine,
        max_tokens_cap=params.max_tokens_cap or context,
        max_queued_prompt_tokens=params.max_queued_prompt_tokens or 8 * kv_tokens,
        max_num_seqs=max_num_seqs,
    )
