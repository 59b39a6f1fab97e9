"""Texts seen again are not tokenized again (gateway/counting.py): a chat client resends
the whole conversation each turn. Counted with tiny-lm's real tokenizer, through a spy
that records what reaches it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from podserve.gateway import counting
from podserve.gateway.counting import PromptCounting
from podserve.gateway.tokens import TokenizerCount

TOKENIZER = Path(__file__).resolve().parents[2] / "examples/models/tiny-lm/tokenizer.json"


class Spy:
    """The real tokenizer, recording each text it is asked to count."""

    def __init__(self) -> None:
        self.real = TokenizerCount(TOKENIZER)
        self.seen: list[str] = []

    def counts(self, texts: Sequence[str]) -> list[int]:
        self.seen += texts
        return self.real.counts(texts)


def _text(tag: str, chars: int) -> str:
    words = f"{tag} says the function returns a value "
    return (words * (chars // len(words) + 1))[:chars]


@pytest.fixture
def spy() -> Spy:
    pytest.importorskip("tokenizers")
    return Spy()


async def test_a_conversation_is_tokenized_one_new_message_a_turn(spy: Spy) -> None:
    cached, uncached = PromptCounting({"m": spy}), PromptCounting({"m": Spy()}, cache_chars=0)
    system = _text("system", 2000)  # off the loop: past INLINE_CHARS
    history = [system]
    try:
        for turn in range(6):
            history.append(_text(f"user {turn}", 300 + 50 * turn))
            seen_before = len(spy.seen)
            got = await cached.count("m", history)
            assert got == await uncached.count("m", history)  # the same total, exactly
            # after the first turn, only the message this turn added reaches the tokenizer
            assert spy.seen[seen_before:] == (history if turn == 0 else [history[-1]])
            history.append(_text(f"assistant {turn}", 400))
            await cached.count("m", history)
        assert cached.cache_hits > 0
    finally:
        cached.close()
        uncached.close()


async def test_short_and_huge_texts_are_counted_every_time(spy: Spy) -> None:
    prompts = PromptCounting({"m": spy})
    short = _text("s", min(counting.CACHED_TEXT_CHARS) - 1)
    huge = _text("h", max(counting.CACHED_TEXT_CHARS) + 1)
    try:
        for _ in range(2):
            await prompts.count("m", [short])
            await prompts.count("m", [huge])
        assert spy.seen == [short, huge, short, huge]
        assert prompts.cache_hits == 0
    finally:
        prompts.close()


async def test_the_cache_keeps_the_recently_used_within_its_characters(spy: Spy) -> None:
    prompts = PromptCounting({"m": spy}, cache_chars=1000)
    a, b, c = (_text(tag, 400) for tag in "abc")
    try:
        await prompts.count("m", [a])
        await prompts.count("m", [b])
        await prompts.count("m", [a])  # a is now the most recently used
        await prompts.count("m", [c])  # 1,200 characters: b goes
        spy.seen.clear()
        await prompts.count("m", [a])
        await prompts.count("m", [c])
        assert spy.seen == []
        await prompts.count("m", [b])
        assert spy.seen == [b]
    finally:
        prompts.close()


async def test_counts_are_kept_per_model(spy: Spy) -> None:
    other = Spy()
    prompts = PromptCounting({"m": spy, "n": other})
    text = _text("x", 600)
    try:
        assert await prompts.count("m", [text]) == await prompts.count("n", [text])
        assert spy.seen == [text]
        assert other.seen == [text]
    finally:
        prompts.close()


async def test_a_cancelled_count_is_not_remembered(spy: Spy) -> None:
    prompts = PromptCounting({"m": spy})
    text = _text("c", 5000)
    try:
        task = asyncio.ensure_future(prompts.count("m", [text]))
        await asyncio.sleep(0)  # handed to the counting thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(1000):  # the thread finishes the count it started
            if prompts.backlog_chars == 0:
                break
            await asyncio.sleep(0.005)
        assert await prompts.count("m", [text]) > 0
        assert spy.seen == [text, text]
    finally:
        prompts.close()
