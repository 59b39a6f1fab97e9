"""The generation engine end to end on the tiny model: streaming, finish reasons, stop
strings, abort, seeded sampling, admission and concurrent clients. Needs the optional
torch + transformers extra."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from podserve.core.errors import InvalidInput  # noqa: E402
from podserve.generation import (  # noqa: E402
    GenerationEngine,
    ModelExecutor,
    SamplingParams,
    TokenEvent,
)
from podserve.generation.stream import RequestStream  # noqa: E402
from podserve.scheduling import SchedulerConfig  # noqa: E402

MODEL_DIR = Path(__file__).resolve().parents[2] / "examples" / "models" / "tiny-lm"
LONG_PROMPT = "Return a list of the names of the files in the directory given by path, sorted"
GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


@pytest.fixture(scope="module")
def executor() -> ModelExecutor:
    torch.set_num_threads(1)
    return ModelExecutor(MODEL_DIR, max_num_seqs=8)


@pytest.fixture
def engine(executor: ModelExecutor) -> Iterator[GenerationEngine]:
    engine = GenerationEngine(
        executor, SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, kv_cache_tokens=4096)
    )
    engine.start()
    yield engine
    engine.stop()
    assert executor.num_sequences == 0
    assert executor.kv.num_free == 8


def collect(
    engine: GenerationEngine, rid: str, prompt: str, params: SamplingParams
) -> list[TokenEvent]:
    return list(engine.submit(rid, engine.executor.encode_prompt(prompt), params))


def test_greedy_stream_equals_generate_and_ends_with_length(
    engine: GenerationEngine, executor: ModelExecutor
) -> None:
    ids = executor.encode_prompt("The function returns")
    config = transformers.GenerationConfig(
        max_new_tokens=24,
        do_sample=False,
        eos_token_id=executor.model.config.vocab_size,
        pad_token_id=0,
    )
    ref = executor.model.generate(
        torch.tensor([ids]),
        attention_mask=torch.ones(1, len(ids), dtype=torch.long),
        generation_config=config,
    )[0, len(ids) :].tolist()
    events = list(engine.submit("a", ids, GREEDY))
    assert [e.token_id for e in events] == ref
    assert [e.finish_reason for e in events] == [None] * 23 + ["length"]
    text = "".join(e.text for e in events)
    assert text == executor.tokenizer.decode(ref, skip_special_tokens=True)
    stats = engine.stats()
    assert stats.generation_tokens_total == 24
    assert stats.prompt_tokens_total == len(ids)


def test_logprobs_are_the_models_own_distribution(
    engine: GenerationEngine, executor: ModelExecutor
) -> None:
    ids = executor.encode_prompt("The function returns")
    params = SamplingParams(temperature=0.7, seed=3, max_tokens=6, ignore_eos=True, logprobs=4)
    events = list(engine.submit("lp", ids, params))
    tokens = [e.token_id for e in events]
    assert all(isinstance(t, int) for t in tokens)
    # every position against one unbatched forward of the whole sequence
    with torch.inference_mode():
        logits = executor.model(torch.tensor([ids + tokens[:-1]])).logits[0, len(ids) - 1 :]
    expected = torch.log_softmax(logits.float(), dim=-1)
    for event, row in zip(events, expected, strict=True):
        assert event.logprob is not None
        assert event.logprob.logprob == pytest.approx(float(row[event.token_id]), abs=1e-4)
        top_ids = [token for token, _ in event.logprob.top]
        assert top_ids == torch.topk(row, 4).indices.tolist()
    plain = list(engine.submit("no-lp", ids, SamplingParams(temperature=0, max_tokens=2)))
    assert all(e.logprob is None for e in plain)


def test_eos_ends_the_stream_with_stop(engine: GenerationEngine) -> None:
    events = collect(
        engine, "a", "The function returns", SamplingParams(temperature=0, max_tokens=40)
    )
    assert events[-1].finish_reason == "stop"
    assert events[-1].token_id == engine.executor.eos_token_id
    assert "".join(e.text for e in events).strip() == "the current process."


def test_stop_string_cuts_the_text_before_it(engine: GenerationEngine) -> None:
    full = "".join(e.text for e in collect(engine, "a", "The function returns", GREEDY))
    stop = full[12:16]
    assert stop
    assert full.find(stop) >= 5
    events = collect(
        engine,
        "b",
        "The function returns",
        SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, stop=(stop,)),
    )
    assert events[-1].finish_reason == "stop"
    assert "".join(e.text for e in events) == full[: full.find(stop)]
    assert len(events) < 24


def test_abort_ends_the_stream_and_frees_the_slot(
    engine: GenerationEngine, executor: ModelExecutor
) -> None:
    stream = engine.submit(
        "long",
        executor.encode_prompt("Return"),
        SamplingParams(temperature=0, max_tokens=400, ignore_eos=True),
    )
    events = iter(stream)
    first = next(events)
    assert first.token_id is not None
    assert first.finish_reason is None
    assert engine.abort("long") is True
    # Tokens the step thread published before the abort are already in the stream (on a
    # loaded machine it can run several steps while the test reads the first token).
    buffered = stream._sync_queue.qsize()
    rest = list(events)
    assert rest[-1] == TokenEvent(None, "", "abort")
    # after those, at most the token of the step that was running, then the end
    assert len(rest) <= buffered + 2
    stats = engine.stats()
    assert stats.num_running == 0
    assert stats.kv_usage_ratio == 0
    assert engine.abort("long") is False
    # the slot goes back at the start of the next step
    collect(engine, "next", "Return", SamplingParams(temperature=0, max_tokens=1))
    assert executor.num_sequences == 0
    assert executor.kv.num_free == 8


def _record_steps(executor: ModelExecutor, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """A log of the engine's forwards (`("forward", input shape)`) and stream events
    (`("put", request id, finish reason, free KV slots)`), in the order they happen."""
    log: list[Any] = []
    forward, put = executor.model.forward, RequestStream.put

    def recording_forward(*args: Any, **kwargs: Any) -> Any:
        out = forward(*args, **kwargs)
        log.append(("forward", tuple(kwargs["input_ids"].shape)))
        return out

    def recording_put(self: RequestStream, event: TokenEvent) -> None:
        log.append(("put", self.request_id, event.finish_reason, executor.kv.num_free))
        put(self, event)

    monkeypatch.setattr(executor.model, "forward", recording_forward)
    monkeypatch.setattr(RequestStream, "put", recording_put)
    return log


def _decoding_stream(engine: GenerationEngine, executor: ModelExecutor) -> Iterator[TokenEvent]:
    """A long stream, already decoding (its first token is out)."""
    long = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
    background = iter(engine.submit("bg", executor.encode_prompt("Return"), long))
    next(background)
    return background


def _first_put(log: list[Any], request_id: str) -> int:
    return next(i for i, entry in enumerate(log) if entry[0] == "put" and entry[1] == request_id)


def test_a_new_request_gets_its_first_token_before_the_step_decodes(
    engine: GenerationEngine, executor: ModelExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prefill forwards run first in a step and their tokens are published at once, so a
    request arriving among running streams waits for its prefill, not the whole step."""
    log = _record_steps(executor, monkeypatch)
    _decoding_stream(engine, executor)
    prompt = executor.encode_prompt(LONG_PROMPT)
    assert len(prompt) > 1
    probe = iter(engine.submit("probe", prompt, SamplingParams(temperature=0, max_tokens=4)))
    assert next(probe).token_id is not None
    list(probe)
    engine.abort("bg")
    first = _first_put(log, "probe")
    # the forward just before the probe's first token is its own prefill, one whole row
    assert log[first - 1] == ("forward", (1, len(prompt)))
    # and the running stream's decode of that step comes after it
    assert log[first + 1] == ("forward", (1, 1))


def test_a_late_request_whose_first_token_is_its_last_ends_before_the_decodes(
    engine: GenerationEngine, executor: ModelExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `max_tokens: 1` request among running streams: its only token ends it, and its
    stream closes right after its prefill forward, with its KV slot already free, not
    after the step's decodes (the scheduler's `finish_in_step`)."""
    log = _record_steps(executor, monkeypatch)
    background = _decoding_stream(engine, executor)
    prompt = executor.encode_prompt("Return a list of")
    events = list(engine.submit("probe", prompt, SamplingParams(temperature=0, max_tokens=1)))
    assert [e.finish_reason for e in events] == ["length"]
    assert events[0].token_id is not None
    at = _first_put(log, "probe")
    while len(log) < at + 2:  # the step thread logs the decode forward that follows
        next(background)
    engine.abort("bg")
    assert log[at - 1] == ("forward", (1, len(prompt)))  # right after its own prefill
    assert log[at + 1] == ("forward", (1, 1))  # the step's decode comes after
    # only the background stream holds a slot when the probe's last event is published
    assert log[at] == ("put", "probe", "length", executor.max_num_seqs - 1)


def test_seeded_sampling_is_reproducible_whatever_the_batch(engine: GenerationEngine) -> None:
    params = SamplingParams(
        temperature=0.9, top_k=40, top_p=0.95, seed=7, max_tokens=20, ignore_eos=True
    )
    alone = [e.token_id for e in collect(engine, "alone", "The function returns", params)]
    mates = [
        engine.submit(
            f"m{i}",
            engine.executor.encode_prompt(p),
            SamplingParams(temperature=1.0, max_tokens=30, ignore_eos=True),
        )
        for i, p in enumerate(["Process", "Return a list of the values"])
    ]
    batched = [e.token_id for e in collect(engine, "batched", "The function returns", params)]
    for stream in mates:
        list(stream)
    other = [
        e.token_id
        for e in collect(
            engine,
            "other",
            "The function returns",
            SamplingParams(
                temperature=0.9, top_k=40, top_p=0.95, seed=8, max_tokens=20, ignore_eos=True
            ),
        )
    ]
    assert alone == batched
    assert other != alone


def test_admission_names_the_limit(engine: GenerationEngine, executor: ModelExecutor) -> None:
    with pytest.raises(InvalidInput, match="context of 512 tokens"):
        engine.submit("x", [1] * 500, SamplingParams(max_tokens=20))
    small = GenerationEngine(executor, SchedulerConfig(max_num_seqs=2, kv_cache_tokens=64))
    with pytest.raises(InvalidInput, match="KV cache of 64 tokens"):
        small.submit("y", [1] * 40, SamplingParams(max_tokens=40))


def test_kv_budget_beyond_the_slot_cache_is_refused(executor: ModelExecutor) -> None:
    # 8 slots x 512 context = 4096 tokens of slot cache
    with pytest.raises(ValueError, match="kv_cache_tokens 4097 exceeds the executor's slot cache"):
        GenerationEngine(executor, SchedulerConfig(max_num_seqs=8, kv_cache_tokens=4097))
    GenerationEngine(executor, SchedulerConfig(max_num_seqs=8, kv_cache_tokens=4096))


def test_concurrent_async_clients_all_complete(engine: GenerationEngine) -> None:
    prompts = ["The function returns", "Return a list", "Process", "What does os.path.join do?"]

    async def client(i: int) -> tuple[int, list[TokenEvent]]:
        ids = engine.executor.encode_prompt(prompts[i % 4])
        max_tokens = 5 + 3 * i
        stream = engine.submit(
            f"c{i}",
            ids,
            SamplingParams(temperature=0.8, seed=i, max_tokens=max_tokens, ignore_eos=True),
        )
        return max_tokens, [event async for event in stream]

    async def main() -> list[tuple[int, list[TokenEvent]]]:
        return await asyncio.gather(*(client(i) for i in range(12)))

    for max_tokens, events in asyncio.run(main()):
        assert len(events) == max_tokens
        assert all(e.token_id is not None for e in events)
        assert [e.finish_reason for e in events][-1] == "length"
        assert all(e.finish_reason is None for e in events[:-1])
    assert engine.stats().generation_tokens_total == sum(5 + 3 * i for i in range(12))
