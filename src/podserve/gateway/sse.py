"""Relay an upstream server-sent-event stream, reading the usage on the way.

Events are split on the blank line that ends each one (WHATWG HTML, "server-sent
events"). Each `data:` payload counts one token per choice (its text even if empty): vLLM
and podserve stream one token per chunk (vllm/entrypoints/openai/serving_completion.py),
so that is what a client that walks away has been sent. The usage chunk the gateway asked
for (`choices: []` plus `usage`) is recorded and, when the client did not ask for it,
dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from podserve.gateway.budget import Usage

MAX_EVENT_BYTES = 1 << 20


@dataclass(slots=True)
class StreamTally:
    tokens_sent: int = 0
    usage: Usage | None = None


class EventRelay:
    """Feed upstream bytes in, get the bytes to send to the client out."""

    __slots__ = ("_buffer", "_keep_usage", "tally")

    def __init__(self, keep_usage_chunk: bool) -> None:
        self._buffer = b""
        self._keep_usage = keep_usage_chunk
        self.tally = StreamTally()

    def feed(self, chunk: bytes) -> bytes:
        self._buffer += chunk
        if len(self._buffer) > MAX_EVENT_BYTES and _event_end(self._buffer)[0] < 0:
            # Not an event stream we can read (no event end in 1 MiB): pass it on as is
            # rather than hold it; its usage, if any, is lost and the hold is charged.
            rest, self._buffer = self._buffer, b""
            return rest
        out: list[bytes] = []
        while True:
            cut, sep = _event_end(self._buffer)
            if cut < 0:
                break
            event = self._buffer[: cut + sep]
            self._buffer = self._buffer[cut + sep :]
            if self._inspect(event[:cut]):
                out.append(event)
        return b"".join(out)

    def flush(self) -> bytes:
        rest, self._buffer = self._buffer, b""
        return rest

    def _inspect(self, event: bytes) -> bool:
        """Record what the event says; False when it must not reach the client."""
        data = b"".join(
            line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:")
        )
        if not data or data == b"[DONE]" or data[:1] != b"{":
            return True
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            return True
        if not isinstance(payload, dict):
            return True
        choices = payload.get("choices")
        if isinstance(choices, list):
            self.tally.tokens_sent += sum(1 for c in choices if _carries_token(c))
        usage = payload.get("usage")
        if isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if isinstance(prompt, int) and isinstance(completion, int):
                self.tally.usage = Usage(prompt, completion)
            if not choices and not self._keep_usage:
                return False
        return True


def _carries_token(choice: object) -> bool:
    """One generated token per chunk, even when its text is empty (a partial UTF-8
    character, a special token); chat's opening role-only delta carries none."""
    if not isinstance(choice, dict):
        return False
    if isinstance(choice.get("text"), str):
        return True
    delta = choice.get("delta")
    return isinstance(delta, dict) and "content" in delta and "role" not in delta


def _event_end(buffer: bytes) -> tuple[int, int]:
    """(index of the blank line ending the first event, its length), or (-1, 0)."""
    best = (-1, 0)
    for sep in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        i = buffer.find(sep)
        if i >= 0 and (best[0] < 0 or i < best[0]):
            best = (i, len(sep))
    return best
