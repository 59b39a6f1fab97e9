"""Measure what presence/frequency penalties cost (not a test).

1. Engine throughput on the tiny model: 16 concurrent requests x 64 new tokens
   (greedy, ignore_eos), with no request penalised, half, and all; runs interleaved in a
   rotating order, the median of each reported, and the ratio to the unpenalised median,
   in tokens per wall second and per CPU second of the process. On a shared CPU the wall
   clock swings with other work; the CPU time is the cost to read.
2. The sampler alone at a large vocabulary (128,256 tokens, Llama 3's) and 16 rows: one
   step's `sample_rows` without penalties, with them after 1 generated token, and with
   them after 1,000 (the counts are incremental, so the step must not grow with the
   sequence), against recounting every row's 1,000 tokens each step (a bincount per
   step, as vLLM v0's sampler built its `output_bin_counts`).

    .venv/bin/python benchmarks/penalties.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from podserve.generation import GenerationEngine, ModelExecutor, SamplingParams
from podserve.generation.penalties import TokenCounts
from podserve.generation.sampling import Sampler, sample_rows
from podserve.scheduling import SchedulerConfig

MODEL_DIR = Path(__file__).resolve().parents[1] / "examples" / "models" / "tiny-lm"
PROMPTS = ["The function returns", "Return a list of the", "Process", "What does json.dumps do?"]
STREAMS = 16
NEW_TOKENS = 64


def params(penalised: bool) -> SamplingParams:
    penalty = 0.5 if penalised else 0.0
    return SamplingParams(
        temperature=0,
        max_tokens=NEW_TOKENS,
        ignore_eos=True,
        presence_penalty=penalty,
        frequency_penalty=penalty,
    )


def throughput(executor: ModelExecutor, penalised_every: int) -> tuple[float, float]:
    """Tokens per wall-clock second and per CPU second of this process (the CPU is shared
    with other work, which moves the wall clock far more than the CPU time); request i is
    penalised when `i % penalised_every == 0` (0: none)."""
    config = SchedulerConfig(max_num_seqs=STREAMS, max_num_batched_tokens=256, kv_cache_tokens=4096)
    engine = GenerationEngine(executor, config)
    engine.start()
    start, cpu = time.perf_counter(), time.process_time()
    streams = [
        engine.submit(
            f"r{i}",
            executor.encode_prompt(PROMPTS[i % 4]),
            params(penalised_every > 0 and i % penalised_every == 0),
        )
        for i in range(STREAMS)
    ]
    tokens = sum(sum(e.token_id is not None for e in s) for s in streams)
    elapsed, cpu_s = time.perf_counter() - start, time.process_time() - cpu
    engine.stop()
    assert tokens == STREAMS * NEW_TOKENS
    assert engine.penalty_rows == 0
    return tokens / elapsed, tokens / cpu_s


def engine_part(rounds: int = 7) -> None:
    executor = ModelExecutor(MODEL_DIR, max_num_seqs=STREAMS)
    throughput(executor, 0)  # warm-up
    runs: dict[str, list[tuple[float, float]]] = {"none": [], "half": [], "all": []}
    every = {"none": 0, "half": 2, "all": 1}
    order = list(runs)
    for r in range(rounds):  # the order rotates each round: no variant always runs first
        for name in order[r % 3 :] + order[: r % 3]:
            runs[name].append(throughput(executor, every[name]))
    wall = statistics.median(w for w, _ in runs["none"])
    cpu = statistics.median(c for _, c in runs["none"])
    print(f"engine, {STREAMS} x {NEW_TOKENS} tokens, median of {rounds} interleaved runs:")
    for name, values in runs.items():
        w = statistics.median(v for v, _ in values)
        c = statistics.median(v for _, v in values)
        print(
            f"  penalised {name:>4}: {w:6.0f} tok/s wall ({w / wall:.3f}x of none), "
            f"{c:6.0f} tok per CPU-s ({c / cpu:.3f}x)"
        )


def per_call_us(fn: Callable[[], object], repeats: int = 50) -> float:
    for _ in range(3):
        fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e6


def sampler_part(vocab: int = 128_256, rows: int = 16, history: int = 1000) -> None:
    torch.manual_seed(0)
    logits = [torch.randn(vocab) for _ in range(rows)]
    plain = [Sampler(SamplingParams(temperature=0)) for _ in range(rows)]
    pen = SamplingParams(temperature=0, presence_penalty=0.5, frequency_penalty=0.5)
    fresh, fresh_counts = [Sampler(pen) for _ in range(rows)], TokenCounts()
    sample_rows(fresh, logits, fresh_counts)  # each has generated one token
    old, old_counts = [Sampler(pen) for _ in range(rows)], TokenCounts()
    for _ in range(history):
        sample_rows(old, logits, old_counts)
    outputs = torch.randint(0, vocab, (rows, history))

    def recount() -> object:
        # the per-step recount incremental counts avoid: bincount every row's history
        counts = torch.zeros(rows, vocab).scatter_add_(1, outputs, torch.ones(rows, history))
        return torch.stack(logits) - 0.5 * counts - 0.5 * (counts > 0)

    times = {
        "no penalties": per_call_us(lambda: sample_rows(plain, logits)),
        "penalties, 1 token generated": per_call_us(
            lambda: sample_rows(fresh, logits, fresh_counts)
        ),
        f"penalties, {history} tokens generated": per_call_us(
            lambda: sample_rows(old, logits, old_counts)
        ),
        f"recount of {history} tokens (reference)": per_call_us(recount),
    }
    base = times["no penalties"]
    print(f"sample_rows, {rows} greedy rows, vocab {vocab} (one step, mean of 50):")
    for name, us in times.items():
        print(f"  {name:<36} {us:8.0f} us  ({us / base:.2f}x of no penalties)")


if __name__ == "__main__":
    torch.set_num_threads(1)  # as the engine runs on the shared CPU
    sampler_part()
    engine_part()
