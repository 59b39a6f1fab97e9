"""The executor's greedy output equals `model.generate` token for token: alone, batched
with sequences of other lengths joining mid-way, with chunked prefill and with preemption
(recompute). Needs the optional torch + transformers extra."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from podserve.generation import ModelExecutor  # noqa: E402
from podserve.scheduling import (  # noqa: E402
    Scheduler,
    SchedulerConfig,
    SequenceOutput,
    SequenceRequest,
    StepResult,
)

MODEL_DIR = Path(__file__).resolve().parents[2] / "examples" / "models" / "tiny-lm"
PROMPTS = [
    "The function returns",
    "Return a list of the",
    "What does json.dumps do? It returns a string that is the value of the object",
    "Process the given",
]
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def executor() -> ModelExecutor:
    torch.set_num_threads(1)
    return ModelExecutor(MODEL_DIR, max_num_seqs=4)


@pytest.fixture(scope="module")
def references(executor: ModelExecutor) -> list[list[int]]:
    # an EOS id outside the vocabulary never matches, so generate runs NEW_TOKENS tokens
    config = transformers.GenerationConfig(
        max_new_tokens=NEW_TOKENS,
        do_sample=False,
        eos_token_id=executor.model.config.vocab_size,
        pad_token_id=0,
    )
    refs = []
    for prompt in PROMPTS:
        ids = torch.tensor([executor.encode_prompt(prompt)])
        out = executor.model.generate(
            ids, attention_mask=torch.ones_like(ids), generation_config=config
        )
        refs.append(out[0, ids.shape[1] :].tolist())
    return refs


def run_greedy(
    executor: ModelExecutor, config: SchedulerConfig, join_every: int
) -> tuple[dict[str, list[int]], Scheduler]:
    """Drive schedule → execute → argmax → update; prompt i arrives at step i*join_every."""
    scheduler = Scheduler(config)
    generated: dict[str, list[int]] = {}
    arrivals = list(enumerate(PROMPTS))
    step = 0
    while arrivals or scheduler.has_unfinished:
        while arrivals and step >= arrivals[0][0] * join_every:
            i, prompt = arrivals.pop(0)
            ids = executor.encode_prompt(prompt)
            executor.add_sequence(str(i), ids)
            scheduler.add(SequenceRequest(str(i), len(ids), NEW_TOKENS))
            generated[str(i)] = []
        step += 1
        out = scheduler.schedule()
        logits = executor.execute(out)
        outputs = []
        for request_id, row in logits.items():
            token = int(torch.argmax(row))
            generated[request_id].append(token)
            executor.append_token(request_id, token)
            outputs.append(SequenceOutput(request_id))
        for finished in scheduler.update(StepResult(tuple(outputs))):
            executor.free(finished.request_id)
    return generated, scheduler


def test_single_sequence_equals_generate(
    executor: ModelExecutor, references: list[list[int]]
) -> None:
    ids = executor.encode_prompt(PROMPTS[2])
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64))
    executor.add_sequence("solo", ids)
    scheduler.add(SequenceRequest("solo", len(ids), NEW_TOKENS))
    tokens: list[int] = []
    while scheduler.has_unfinished:
        logits = executor.execute(scheduler.schedule())
        token = int(torch.argmax(logits["solo"]))
        tokens.append(token)
        executor.append_token("solo", token)
        for finished in scheduler.update(StepResult((SequenceOutput("solo"),))):
            executor.free(finished.request_id)
    assert tokens == references[2]
    assert executor.kv.num_free == 4
    assert executor.num_sequences == 0


@pytest.mark.parametrize("join_every", [0, 3, 7])
def test_batched_staggered_joins_with_chunked_prefill_equal_generate(
    executor: ModelExecutor, references: list[list[int]], join_every: int
) -> None:
    # 5-token prefill chunks and a 12-token step budget: long prompts prefill over
    # several steps while the others decode
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=12, prefill_chunk_tokens=5)
    generated, _ = run_greedy(executor, config, join_every)
    assert [generated[str(i)] for i in range(len(PROMPTS))] == references
    assert executor.kv.num_free == 4
    assert executor.num_sequences == 0


def test_preemption_recompute_keeps_output_equal_to_generate(
    executor: ModelExecutor, references: list[list[int]]
) -> None:
    # a KV budget well under the 4 sequences' total forces preemption by recompute
    config = SchedulerConfig(
        max_num_seqs=4, max_num_batched_tokens=16, kv_cache_tokens=60, prefill_chunk_tokens=8
    )
    generated, scheduler = run_greedy(executor, config, join_every=2)
    assert scheduler.num_preemptions > 0
    assert [generated[str(i)] for i in range(len(PROMPTS))] == references
    assert executor.kv.num_free == 4
    assert executor.num_sequences == 0


def record_forwards(executor: ModelExecutor, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    forward = executor.model.forward

    def recording(*args: Any, **kwargs: Any) -> Any:
        calls.append(tuple(kwargs["input_ids"].shape))
        return forward(*args, **kwargs)

    monkeypatch.setattr(executor.model, "forward", recording)
    return calls


def step_greedy(executor: ModelExecutor, scheduler: Scheduler) -> dict[str, int]:
    logits = executor.execute(scheduler.schedule())
    tokens = {r: int(torch.argmax(row)) for r, row in logits.items()}
    for request_id, token in tokens.items():
        executor.append_token(request_id, token)
    for finished in scheduler.update(StepResult(tuple(SequenceOutput(r) for r in tokens))):
        executor.free(finished.request_id)
    return tokens


def test_decodes_of_different_lengths_run_in_one_forward(
    executor: ModelExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = record_forwards(executor, monkeypatch)
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=128))
    lengths = []
    for i, prompt in enumerate(PROMPTS):
        ids = executor.encode_prompt(prompt)
        lengths.append(len(ids))
        executor.add_sequence(str(i), ids)
        scheduler.add(SequenceRequest(str(i), len(ids), 2))
    for _ in range(2):
        step_greedy(executor, scheduler)
    # step 1: the prefills (every prompt is over one token) before any decode, grouped
    # by `_forward_groups` (padded rows); step 2: one forward of four decode rows
    first_step = calls[:-1]
    assert sum(rows for rows, _ in first_step) == len(lengths)
    assert max(width for _, width in first_step) == max(lengths)
    assert calls[-1] == (4, 1)
    assert executor.num_sequences == 0


def test_a_late_prefill_runs_before_the_decodes_and_equals_generate(
    executor: ModelExecutor, references: list[list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # three sequences decode; then a fourth prompt arrives: its prefill is the step's
    # first forward (its first token is out before the decodes run), the decodes the second
    calls = record_forwards(executor, monkeypatch)
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64))
    generated: dict[str, list[int]] = {}
    for i in (0, 1, 2):
        ids = executor.encode_prompt(PROMPTS[i])
        executor.add_sequence(str(i), ids)
        scheduler.add(SequenceRequest(str(i), len(ids), NEW_TOKENS))
        generated[str(i)] = []
    for _ in range(3):
        for r, token in step_greedy(executor, scheduler).items():
            generated[r].append(token)
    late = executor.encode_prompt(PROMPTS[3])
    executor.add_sequence("3", late)
    scheduler.add(SequenceRequest("3", len(late), NEW_TOKENS))
    generated["3"] = []
    calls.clear()
    first = step_greedy(executor, scheduler)
    assert calls == [(1, len(late)), (3, 1)]
    assert set(first) == {"0", "1", "2", "3"}
    for r, token in first.items():
        generated[r].append(token)
    while scheduler.has_unfinished:
        for r, token in step_greedy(executor, scheduler).items():
            generated[r].append(token)
    assert [generated[str(i)] for i in range(4)] == references
    assert executor.kv.num_free == 4


def test_padded_ragged_forward_of_whole_chunks_equals_generate(
    executor: ModelExecutor, references: list[list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # prefill chunks of different lengths share padded forwards (rows right-aligned,
    # 4-D mask, explicit positions) while other requests decode
    calls = record_forwards(executor, monkeypatch)
    monkeypatch.setattr(executor, "forward_overhead_tokens", 10_000)  # prefills: one forward
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=16, prefill_chunk_tokens=7)
    generated, _ = run_greedy(executor, config, join_every=2)
    assert [generated[str(i)] for i in range(len(PROMPTS))] == references
    assert any(rows > 1 and width > 1 for rows, width in calls)  # mixed, padded forwards
    assert executor.kv.num_free == 4
    assert executor.num_sequences == 0
