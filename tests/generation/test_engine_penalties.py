"""Presence and frequency penalties in the real engine on the bundled tiny LM: greedy output
equals an unbatched reference that recomputes every step from scratch; a frequency penalty
stops a repetition the model makes without it; penalised and plain sequences in one batch,
and a penalised sequence preempted and recomputed, each give their output alone; the counts'
rows go back when requests end or are aborted."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from podserve.generation import GenerationEngine, ModelExecutor, SamplingParams  # noqa: E402
from podserve.scheduling import SchedulerConfig  # noqa: E402

MODEL_DIR = Path(__file__).resolve().parents[2] / "examples" / "models" / "tiny-lm"
# Greedy, the tiny LM answers this with " same of the same of the same value.": the token
# " same" three times in 12 tokens.
REPEATS = "The list of the list of the"
TOKENS = 12


@pytest.fixture(scope="module")
def executor() -> ModelExecutor:
    torch.set_num_threads(1)
    return ModelExecutor(MODEL_DIR, max_num_seqs=4)


def new_engine(executor: ModelExecutor, kv_cache_tokens: int = 2048) -> GenerationEngine:
    return GenerationEngine(
        executor,
        SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, kv_cache_tokens=kv_cache_tokens),
    )


@pytest.fixture
def engine(executor: ModelExecutor) -> Iterator[GenerationEngine]:
    engine = new_engine(executor)
    engine.start()
    yield engine
    engine.stop()
    assert engine.penalty_rows == 0
    assert executor.num_sequences == 0


def greedy(presence: float = 0.0, frequency: float = 0.0, tokens: int = TOKENS) -> SamplingParams:
    return SamplingParams(
        temperature=0,
        max_tokens=tokens,
        ignore_eos=True,
        presence_penalty=presence,
        frequency_penalty=frequency,
    )


def tokens_of(
    engine: GenerationEngine, rid: str, prompt: str, params: SamplingParams
) -> list[int | None]:
    ids = engine.executor.encode_prompt(prompt)
    return [e.token_id for e in engine.submit(rid, ids, params)]


def reference(executor: ModelExecutor, prompt: str, presence: float, frequency: float) -> list[int]:
    """Greedy decoding the slow, obvious way: a full forward over prompt + generated tokens
    at every step (no KV cache, no batch), then OpenAI's formula over a fresh count of the
    generated tokens."""
    ids = executor.encode_prompt(prompt)
    out: list[int] = []
    for _ in range(TOKENS):
        with torch.inference_mode():
            logits = executor.model(input_ids=torch.tensor([ids + out])).logits[0, -1]
        logits = logits.float().clone()  # an inference tensor is read-only outside
        for token, count in Counter(out).items():
            logits[token] -= frequency * count + presence
        out.append(int(logits.argmax()))
    return out


@pytest.mark.parametrize(("presence", "frequency"), [(0.0, 0.0), (0.0, 2.0), (1.5, 0.0), (-1, 1)])
def test_greedy_output_equals_the_unbatched_reference(
    engine: GenerationEngine, executor: ModelExecutor, presence: float, frequency: float
) -> None:
    got = tokens_of(engine, "r", REPEATS, greedy(presence, frequency))
    assert got == reference(executor, REPEATS, presence, frequency)
    if presence or frequency:  # and the penalty made a difference
        assert got != reference(executor, REPEATS, 0.0, 0.0)


def test_frequency_penalty_stops_a_repetition(engine: GenerationEngine) -> None:
    plain = tokens_of(engine, "plain", REPEATS, greedy())
    token, times = Counter(plain).most_common(1)[0]
    assert times >= 3  # the model repeats itself without a penalty
    penalised = tokens_of(engine, "penalised", REPEATS, greedy(frequency=2.0))
    assert penalised != plain
    assert penalised.count(token) <= 1
    assert engine.penalty_rows == 0  # the finished request gave its row back


def test_mixed_batch_gives_each_sequence_its_output_alone(executor: ModelExecutor) -> None:
    """A penalised and a plain greedy sequence and a penalised seeded sampled one, submitted
    before the engine starts so that every step runs them together."""
    cases = {
        "penalised": greedy(frequency=2.0),
        "plain": greedy(),
        "sampled": SamplingParams(
            temperature=0.8, seed=5, max_tokens=TOKENS, ignore_eos=True, presence_penalty=1.0
        ),
    }
    alone: dict[str, list[int | None]] = {}
    with_engine = new_engine(executor)
    with_engine.start()
    try:
        for rid, params in cases.items():
            alone[rid] = tokens_of(with_engine, rid, REPEATS, params)
    finally:
        with_engine.stop()
    batch = new_engine(executor)
    ids = executor.encode_prompt(REPEATS)
    streams = {rid: batch.submit(rid, ids, params) for rid, params in cases.items()}
    batch.start()
    try:
        together = {rid: [e.token_id for e in stream] for rid, stream in streams.items()}
    finally:
        batch.stop()
    assert together == alone
    assert alone["penalised"] != alone["plain"]
    assert batch.penalty_rows == 0


def test_a_preempted_sequence_keeps_its_counts(executor: ModelExecutor) -> None:
    """A KV budget under the two sequences' total makes the newest one preempted and
    recomputed mid-way; its penalties still count the tokens it generated before."""
    params = greedy(frequency=2.0, tokens=24)
    ids = executor.encode_prompt(REPEATS)
    roomy = new_engine(executor)
    roomy.start()
    try:
        alone = [e.token_id for e in roomy.submit("alone", ids, params)]
    finally:
        roomy.stop()
    tight = new_engine(executor, kv_cache_tokens=len(ids) + 24 + 12)
    streams = [tight.submit(f"s{i}", ids, params) for i in range(2)]
    tight.start()
    try:
        outputs = [[e.token_id for e in stream] for stream in streams]
    finally:
        tight.stop()
    assert tight.stats().num_preemptions > 0
    assert outputs == [alone, alone]


def test_an_aborted_sequence_gives_its_row_back(engine: GenerationEngine) -> None:
    ids = engine.executor.encode_prompt(REPEATS)
    events = iter(engine.submit("long", ids, greedy(presence=0.5, tokens=400)))
    assert next(events).token_id is not None  # it has run a step: it holds a row
    assert engine.penalty_rows == 1
    assert engine.abort("long")
    assert engine.penalty_rows == 0
    assert list(events)[-1].finish_reason == "abort"
