"""How many prompt tokens to reserve for: exact with the model's tokenizer, else a bound.

Without a tokenizer the bound is the prompt's UTF-8 byte count: byte-level BPE (GPT-2,
Llama 3, tiny-lm) and SentencePiece with byte fallback emit at most one token per byte, so
the bound never undercounts. A chat request adds its template's tokens: at most
`CHAT_OVERHEAD_PER_MESSAGE` per message (role markers, separators) plus
`CHAT_OVERHEAD_FIXED` for the generation prompt — generous against the templates of
Llama 3 (5 per message), ChatML (4) and tiny-lm (2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

CHAT_OVERHEAD_PER_MESSAGE = 8
CHAT_OVERHEAD_FIXED = 8


class Counter(Protocol):
    def counts(self, texts: Sequence[str]) -> list[int]:
        """The tokens of each of `texts`."""
        ...


class ByteBound:
    """The tokenizer-free upper bound."""

    def count(self, texts: Sequence[str]) -> int:
        # An ASCII string's UTF-8 length is its length, and CPython knows a string is
        # ASCII without scanning it (str.isascii is O(1)): no 16 MB copy for a big prompt.
        return sum(len(t) if t.isascii() else len(t.encode()) for t in texts)


@dataclass(frozen=True, slots=True)
class TokenizerCount:
    """A Hugging Face `tokenizer.json`, loaded with `tokenizers` (the `llm` extra).

    `encode_batch`, even for one text: the bindings release the GIL around a batch
    (`py.allow_threads` in tokenizers' bindings/python/src/tokenizer.rs) but hold it for
    `encode`. Measured here on tiny-lm's tokenizer, a 1 MB prompt: a 1 ms ticker thread
    saw a worst gap of 463 ms beside `encode` and 28 ms beside `encode_batch`, so only
    the batch call lets the event loop run while a counting thread works.
    """

    path: Path

    def counts(self, texts: Sequence[str]) -> list[int]:
        encoded = _load(str(self.path)).encode_batch(list(texts), add_special_tokens=True)
        return [len(e.ids) for e in encoded]


_CACHE: dict[str, object] = {}


def _load(path: str) -> _Encoder:
    found = _CACHE.get(path)
    if found is None:
        from tokenizers import Tokenizer  # lazily: only for models given a tokenizer

        found = _CACHE[path] = Tokenizer.from_file(path)
    return found  # type: ignore[return-value]  # tokenizers.Tokenizer matches _Encoder


class _Encoding(Protocol):
    @property
    def ids(self) -> list[int]: ...


class _Encoder(Protocol):
    def encode_batch(self, texts: list[str], add_special_tokens: bool = ...) -> list[_Encoding]: ...


def chat_overhead(messages: int) -> int:
    """The chat template's tokens around `messages` messages' contents (a bound)."""
    return CHAT_OVERHEAD_PER_MESSAGE * messages + CHAT_OVERHEAD_FIXED
