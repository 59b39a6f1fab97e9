"""Server-sent events: split a byte stream into events, and time the tokens of an
OpenAI-style completion stream (TTFT, inter-token gaps, token count)."""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson

DONE_SENTINEL = b"[DONE]"


class SseDecoder:
    """Turns body bytes into the `data` payloads of complete events (fields other than
    `data` and comment lines are dropped; multi-line data is joined with newlines)."""

    __slots__ = ("_buf", "_pending_cr")

    def __init__(self) -> None:
        self._buf = b""
        self._pending_cr = False

    def feed(self, data: bytes) -> list[bytes]:
        if self._pending_cr:
            data = b"\r" + data
            self._pending_cr = False
        if data.endswith(b"\r"):
            # A CRLF may be split across two pieces; keep the CR until we see what follows.
            data = data[:-1]
            self._pending_cr = True
        self._buf += data.replace(b"\r\n", b"\n")
        if b"\n\n" not in self._buf:
            return []
        *events, self._buf = self._buf.split(b"\n\n")
        payloads: list[bytes] = []
        for event in events:
            lines = [
                line[5:].removeprefix(b" ")
                for line in event.split(b"\n")
                if line.startswith(b"data:")
            ]
            if lines:
                payloads.append(b"\n".join(lines))
        return payloads


class TokenStreamMeter:
    """Consumes an OpenAI completion/chat stream and records when each token chunk arrived.

    A chunk with non-empty `delta.content` (chat) or `text` (completions) counts as one
    arrival; the token count comes from the final `usage` when the server sends it
    (`stream_options.include_usage`), else from the number of chunks.
    """

    __slots__ = ("_clock", "_decoder", "done", "token_times_s", "usage_tokens")

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._decoder = SseDecoder()
        self.token_times_s: list[float] = []
        self.usage_tokens: int | None = None
        self.done = False

    @property
    def output_tokens(self) -> int:
        if self.usage_tokens is not None:
            return self.usage_tokens
        return len(self.token_times_s)

    def feed(self, data: bytes) -> None:
        now = self._clock()
        for payload in self._decoder.feed(data):
            if payload == DONE_SENTINEL:
                self.done = True
                continue
            chunk = orjson.loads(payload)
            if not isinstance(chunk, dict):
                continue
            if _has_content(chunk):
                self.token_times_s.append(now)
            usage = chunk.get("usage")
            if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                self.usage_tokens = usage["completion_tokens"]


def _has_content(chunk: dict[str, object]) -> bool:
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict) and delta.get("content"):
            return True
        if choice.get("text"):
            return True
    return False
