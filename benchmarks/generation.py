"""Measure the generation engine on the tiny model (not a test).

1. Throughput: 32 concurrent requests x 64 new tokens (ignore_eos), max_num_seqs=32 vs 1.
2. TTFT of one request arriving while 16 long streams decode, vs on an idle engine.

    .venv/bin/python benchmarks/generation.py
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

import torch

from podserve.generation import GenerationEngine, ModelExecutor, SamplingParams
from podserve.scheduling import SchedulerConfig

MODEL_DIR = Path(__file__).resolve().parents[1] / "examples" / "models" / "tiny-lm"
PROMPTS = ["The function returns", "Return a list of the", "Process", "What does json.dumps do?"]


def engine_for(executor: ModelExecutor, max_num_seqs: int) -> GenerationEngine:
    config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max(256, max_num_seqs),
        kv_cache_tokens=max_num_seqs * executor.max_context,
    )
    engine = GenerationEngine(executor, config)
    engine.start()
    return engine


def throughput(executor: ModelExecutor, max_num_seqs: int, n: int = 32, new: int = 64) -> float:
    engine = engine_for(executor, max_num_seqs)
    params = SamplingParams(temperature=0, max_tokens=new, ignore_eos=True)
    start = time.perf_counter()
    streams = [
        engine.submit(f"r{i}", executor.encode_prompt(PROMPTS[i % 4]), params) for i in range(n)
    ]
    tokens = sum(sum(e.token_id is not None for e in s) for s in streams)
    elapsed = time.perf_counter() - start
    engine.stop()
    assert tokens == n * new
    return tokens / elapsed


def ttft_ms(executor: ModelExecutor, background: int, repeats: int = 5) -> float:
    engine = engine_for(executor, 32)
    long = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
    streams = [
        engine.submit(f"bg{i}", executor.encode_prompt(PROMPTS[i % 4]), long)
        for i in range(background)
    ]
    drains = [threading.Thread(target=lambda s=s: list(s)) for s in streams]
    for t in drains:
        t.start()
    samples = []
    probe = SamplingParams(temperature=0, max_tokens=1)
    for k in range(repeats):
        if background:
            time.sleep(0.05)  # let the background streams reach steady decoding
        start = time.perf_counter()
        next(iter(engine.submit(f"probe{k}", executor.encode_prompt(PROMPTS[1]), probe)))
        samples.append((time.perf_counter() - start) * 1000)
    for i in range(background):
        engine.abort(f"bg{i}")
    for t in drains:
        t.join()
    engine.stop()
    return statistics.median(samples)


def main() -> None:
    torch.set_num_threads(1)
    executor = ModelExecutor(MODEL_DIR, max_num_seqs=32)
    throughput(executor, 32, n=4, new=8)  # warm-up
    batched = throughput(executor, 32)
    serial = throughput(executor, 1)
    print(f"throughput max_num_seqs=32: {batched:8.0f} tok/s")
    print(f"throughput max_num_seqs=1 : {serial:8.0f} tok/s")
    print(f"ratio                     : {batched / serial:8.1f}x  (target >= 8x)")
    idle = ttft_ms(executor, 0)
    busy = ttft_ms(executor, 16)
    print(f"TTFT idle                 : {idle:8.1f} ms (median of 5)")
    print(f"TTFT with 16 streams      : {busy:8.1f} ms (median of 5)")
    print(f"ratio                     : {busy / idle:8.1f}x  (target <= 3x)")


if __name__ == "__main__":
    main()
