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
    def count(self, text: str) -> int: ...


class ByteBound:
    """The tokenizer-free upper bound."""

    def count(self, text: str) -> int:
        return len(text.encode())


@dataclass(frozen=True, slots=True)
class TokenizerCount:
    """A Hugging Face `tokenizer.json`, loaded with `tokenizers` (the `llm` extra)."""

    path: Path

    def count(self, text: str) -> int:
        return len(_load(str(self.path)).encode(text, add_special_tokens=True).ids)


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
    def encode(self, text: str, add_special_tokens: bool = ...) -> _Encoding: ...


def completion_prompt_tokens(counter: Counter, prompt: str | Sequence[str]) -> int:
    texts = [prompt] if isinstance(prompt, str) else list(prompt)
    return sum(counter.count(t) for t in texts)


def chat_prompt_tokens(counter: Counter, contents: Sequence[str]) -> int:
    body = sum(counter.count(c) for c in contents)
    return body + CHAT_OVERHEAD_PER_MESSAGE * len(contents) + CHAT_OVERHEAD_FIXED
