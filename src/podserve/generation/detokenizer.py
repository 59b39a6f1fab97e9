"""Incremental detokenisation and stop strings, per request.

Decoding one token at a time is wrong for byte-level BPE (a character can span tokens)
and for tokenizers that merge spaces, so each step decodes a short window of recent ids
twice and emits the difference, holding back while the text ends in an incomplete
character (U+FFFD). Text that could be the start of a stop string is held back too, so
nothing after a stop string ever reaches the client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_REPLACEMENT = "\ufffd"


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str  # safe to emit now
    stopped: bool  # a stop string was completed; `text` ends before it


class IncrementalDetokenizer:
    __slots__ = ("_held", "_ids", "_prefix_offset", "_read_offset", "_stop", "_tokenizer")

    def __init__(self, tokenizer: Any, prompt_ids: list[int], stop: tuple[str, ...] = ()) -> None:
        self._tokenizer = tokenizer
        # start from a few prompt tokens so the first generated token decodes with the
        # spacing it has in context
        self._ids = list(prompt_ids[-5:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._stop = stop
        self._held = ""

    def _decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=True))

    def add(self, token_id: int) -> TextDelta:
        self._ids.append(token_id)
        prefix = self._decode(self._ids[self._prefix_offset : self._read_offset])
        full = self._decode(self._ids[self._prefix_offset :])
        if len(full) <= len(prefix) or full.endswith(_REPLACEMENT):
            return self._check("")
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        return self._check(full[len(prefix) :])

    def flush(self) -> str:
        """The held-back text, at a finish that was not a stop string."""
        held, self._held = self._held, ""
        return held

    def _check(self, new_text: str) -> TextDelta:
        text = self._held + new_text
        if not self._stop:
            self._held = ""
            return TextDelta(text, stopped=False)
        hits = [i for i in (text.find(s) for s in self._stop) if i >= 0]
        if hits:
            self._held = ""
            return TextDelta(text[: min(hits)], stopped=True)
        keep = _partial_stop_suffix(text, self._stop)
        self._held = text[len(text) - keep :] if keep else ""
        return TextDelta(text[: len(text) - keep], stopped=False)


def _partial_stop_suffix(text: str, stops: tuple[str, ...]) -> int:
    """The length of the longest suffix of `text` that is a proper prefix of a stop."""
    best = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:n]):
                best = n
                break
    return best
