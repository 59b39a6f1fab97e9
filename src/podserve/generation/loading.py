"""Load a generative model (runtime `transformers`): the executor over a local causal-LM
directory and the engine driving it, started and warmed up with one token.

Parameters (model.yaml `parameters:`):
  max_num_seqs              sequences decoded together (default 32)
  max_num_batched_tokens    tokens computed per step, decodes + prefill chunks (default 512)
  prefill_chunk_tokens      prompt tokens per request per step (default 256): long prompts
                            are prefilled in chunks so they do not stall running streams
  kv_cache_tokens           the KV budget in tokens (default max_num_seqs x context)
  max_tokens_cap            largest max_tokens a request may ask for (default: the context)
  max_queued_prompt_tokens  prompt tokens allowed to wait (default 8 x kv_cache_tokens)
  max_context_tokens        cap on prompt + max_tokens, below the model's own context
  torch_threads             torch intra-op threads (default torch's)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from podserve.config.model_config import ModelConfig
from podserve.core.errors import ModelLoadFailed
from podserve.generation.engine import GenerationEngine
from podserve.generation.executor import ModelExecutor
from podserve.generation.sampling import SamplingParams
from podserve.scheduling import SchedulerConfig

GENERATIVE_RUNTIMES = frozenset({"transformers"})


@dataclass(frozen=True, slots=True)
class LoadedGenerator:
    executor: ModelExecutor
    engine: GenerationEngine
    max_tokens_cap: int
    max_queued_prompt_tokens: int
    max_num_seqs: int


def load_generator(config: ModelConfig) -> LoadedGenerator:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are local; never reach a hub
    params: dict[str, Any] = dict(config.parameters)
    directory = config.directory or config.artifact_path()
    max_num_seqs = int(params.get("max_num_seqs", 32))
    try:
        executor = ModelExecutor(
            directory,
            max_num_seqs=max_num_seqs,
            max_context=int(params["max_context_tokens"])
            if params.get("max_context_tokens")
            else None,
            torch_threads=int(params["torch_threads"]) if params.get("torch_threads") else None,
        )
    except (OSError, ValueError) as exc:
        raise ModelLoadFailed(f"cannot load a causal LM from {directory}: {exc}") from exc
    context = executor.max_context
    kv_tokens = int(params.get("kv_cache_tokens", max_num_seqs * context))
    try:
        scheduler = SchedulerConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=int(
                params.get("max_num_batched_tokens", max(512, max_num_seqs))
            ),
            kv_cache_tokens=kv_tokens,
            prefill_chunk_tokens=int(params.get("prefill_chunk_tokens", 256)),
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
        max_tokens_cap=int(params.get("max_tokens_cap", context)),
        max_queued_prompt_tokens=int(params.get("max_queued_prompt_tokens", 8 * kv_tokens)),
        max_num_seqs=max_num_seqs,
    )
