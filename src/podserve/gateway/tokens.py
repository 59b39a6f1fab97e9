"""How many prompt tokens to reserve for: exact with the model's tokenizer, else a bound.

Without a tokenizer the bound is the prompt's UTF-8 byte count: byte-level BPE (GPT-2,
Llama 3, tiny-lm) and SentencePiece with byte fallback emit at most one token per byte, so
the bound never undercounts. A chat request adds its template's tokens: at most
`CHAT_OVERHEAD_PER_MESSAGE` per message (role markers, separators) plus
`CHAT_OVERHEAD_FIXED` for the generation prompt — generous against the templates of
Llama 3 (5 per message), ChatML (4) and tiny-lm (2).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

CHAT_OVERHEAD_PER_MESSAGE = 8
CHAT_OVERHEAD_FIXED = 8
# The special tokens a tokenizer may add to each text it encodes (BOS, EOS, a prefix
# space): a bound, generous against Llama's 1 and BERT's 2, so that a short prompt is not
# bounded below its real count ("a": 1 byte, 2 tokens with a BOS).
SPECIALS_PER_TEXT = 4
# One tokenizer call holds an Encoding per text (ids, offsets, token strings, masks:
# about 190 bytes a token here: a 1 M-character prompt took the gateway from 68 to 254 MB),
# so texts are encoded in batches of at most this many characters and texts, a longer
# text in pieces. A piece cut inside a word can only add tokens, as can a piece's own
# special tokens: the count stays an upper bound, exact for texts under the slice.
SLICE_CHARS = 64 * 1024
SLICE_TEXTS = 256


class Counter(Protocol):
    def counts(self, texts: Sequence[str]) -> list[int]:
        """The tokens of each of `texts`."""
        ...


@dataclass(frozen=True, slots=True)
class LargestCount:
    """Each text's largest count among tokenizers: a model served by upstreams that
    tokenize differently (a hosted fallback knowing it by another name) is held at what
    the dearest of them could bill."""

    counters: tuple[Counter, ...]

    def counts(self, texts: Sequence[str]) -> list[int]:
        each = [counter.counts(texts) for counter in self.counters]
        return [max(column) for column in zip(*each, strict=True)]


class ByteBound:
    """The tokenizer-free upper bound."""

    def count(self, texts: Sequence[str]) -> int:
        # An ASCII string's UTF-8 length is its length, and CPython knows a string is
        # ASCII without scanning it (str.isascii is O(1)): no 16 MB copy for a big prompt.
        utf8 = sum(len(t) if t.isascii() else len(t.encode()) for t in texts)
        return utf8 + SPECIALS_PER_TEXT * len(texts)


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
        tokenizer = _load(str(self.path))
        if len(texts) <= SLICE_TEXTS and sum(map(len, texts)) <= SLICE_CHARS:  # most prompts
            encoded = tokenizer.encode_batch(list(texts), add_special_tokens=True)
            return [len(e.ids) for e in encoded]
        out = [0] * len(texts)
        for owners, batch in _batches(texts):
            for owner, encoding in zip(
                owners, tokenizer.encode_batch(batch, add_special_tokens=True), strict=True
            ):
                out[owner] += len(encoding.ids)
        return out


def _batches(texts: Sequence[str]) -> Iterator[tuple[list[int], list[str]]]:
    """(which text each piece is of, the pieces): at most SLICE_CHARS characters and
    SLICE_TEXTS pieces a batch; a text longer than SLICE_CHARS is cut, at whitespace
    where there is some in the piece's second half."""
    owners: list[int] = []
    batch: list[str] = []
    size = 0
    for index, text in enumerate(texts):
        for piece in _pieces(text):
            if batch and (size + len(piece) > SLICE_CHARS or len(batch) == SLICE_TEXTS):
                yield owners, batch
                owners, batch, size = [], [], 0
            owners.append(index)
            batch.append(piece)
            size += len(piece)
    if batch:
        yield owners, batch


def _pieces(text: str) -> Iterator[str]:
    start = 0
    while len(text) - start > SLICE_CHARS:
        end = start + SLICE_CHARS
        cut = text.rfind(" ", start + SLICE_CHARS // 2, end)
        end = end if cut < 0 else cut
        yield text[start:end]
        start = end
    yield text[start:]


_CACHE: dict[str, object] = {}


class TokenizerUnusable(Exception):
    """A configured tokenizer.json that cannot be loaded (missing, unreadable, not a
    tokenizer, or the `tokenizers` package absent)."""


def preload(path: str) -> None:
    """Load `path` now, at the gateway's start: loading on first use made a missing file
    every request's 500 for that model while the gateway looked healthy."""
    try:
        _load(path)
    except ImportError as exc:
        raise TokenizerUnusable(
            f"{path}: the tokenizers package is not installed (podserve[llm])"
        ) from exc
    except Exception as exc:  # tokenizers raises a bare Exception for a missing file
        raise TokenizerUnusable(f"{path}: {exc}") from exc


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
