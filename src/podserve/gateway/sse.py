"""Relay an upstream server-sent-event stream, reading the usage on the way.

Events are split on the blank line that ends each one (WHATWG HTML, "server-sent
events"). Each `data:` payload counts one token per choice (its text even if empty): vLLM
and podserve stream one token per chunk (vllm/entrypoints/openai/serving_completion.py),
so that is what a client that walks away has been sent. A chat chunk counts whatever
generated output its delta carries: content, reasoning, a tool call, a refusal. The usage
chunk the gateway asked for (`choices: []` plus `usage`) is recorded and, when the client
did not ask for it, dropped. Usage is read as the non-streamed path reads it
(`usage.usage_of`: counts only, bounded, completion tokens required), and of several usage
chunks the largest counts are kept: a server reporting cumulative usage in every chunk
(vLLM's `continuous_usage_stats`) ends with the largest, and a later chunk of zeros no
longer made a request free.

Events are found with one scan per read that starts where the last one stopped, and the
buffer is cut once per read: cutting it once per event copied the rest each time, and a
burst of 20,000 events in one read held the event loop for 2.8 s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson

from podserve.gateway.budget import Usage
from podserve.gateway.usage import usage_of

MAX_EVENT_BYTES = 1 << 20


@dataclass(slots=True)
class StreamTally:
    tokens_sent: int = 0
    usage: Usage | None = None


class EventRelay:
    """Feed upstream bytes in, get the bytes to send to the client out."""

    __slots__ = ("_buffer", "_keep_usage", "_scanned", "tally")

    def __init__(self, keep_usage_chunk: bool) -> None:
        self._buffer = b""
        self._scanned = 0  # how far the buffer is known to hold no event end
        self._keep_usage = keep_usage_chunk
        self.tally = StreamTally()

    def feed(self, chunk: bytes) -> bytes:
        buffer = self._buffer + chunk if self._buffer else chunk
        out: list[bytes] = []
        start = 0
        # An event end may straddle the last read: look again from 3 bytes before.
        for end in _EVENT_END.finditer(buffer, max(0, self._scanned - 3)):
            if self._inspect(buffer[start : end.start()]):
                out.append(buffer[start : end.end()])
            start = end.end()
        rest = buffer[start:]
        if len(rest) > MAX_EVENT_BYTES:
            # Not an event stream we can read (no event end in 1 MiB): pass it on as is
            # rather than hold it; its usage, if any, is lost and the hold is charged.
            out.append(rest)
            rest = b""
        self._buffer = rest
        self._scanned = len(rest)
        return b"".join(out)

    def flush(self) -> bytes:
        rest, self._buffer, self._scanned = self._buffer, b"", 0
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
            reported = usage_of(usage, generates=True)  # streams: completions and chat
            if reported is not None:
                kept = self.tally.usage
                self.tally.usage = (
                    reported
                    if kept is None
                    else Usage(
                        max(kept.prompt_tokens, reported.prompt_tokens),
                        max(kept.completion_tokens, reported.completion_tokens),
                    )
                )
            if not choices and not self._keep_usage:
                return False
        return True


# A chat delta's fields that carry generated output. A tool call's name and arguments
# (vLLM's tool parsers, OpenAI), reasoning (vLLM's reasoning parsers: `reasoning`, which
# "used to be called `reasoning_content`", docs.vllm.ai "Reasoning Outputs"; both are
# sent), a refusal and the legacy `function_call` are tokens the model generated as much
# as `content` is: a cancelled stream of tool-call or reasoning deltas counted only
# `content` and was charged no output at all.
_GENERATED = ("content", "reasoning_content", "reasoning", "refusal", "tool_calls", "function_call")


def _carries_token(choice: object) -> bool:
    """One generated token per chunk and choice, even when its text is empty (a partial
    UTF-8 character, a special token). Chat's opening delta names the role and carries
    none (vLLM: `content: ""`; OpenAI: `content: ""`, `refusal: null`), unless it also
    carries some output; a null field carries nothing."""
    if not isinstance(choice, dict):
        return False
    if isinstance(choice.get("text"), str):
        return True
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return False
    values = [delta.get(field) for field in _GENERATED]
    if "role" in delta:
        return any(values)  # the opener: only what is not empty
    return any(v is not None and v != [] for v in values)


# The blank line that ends an event, in any of the three line endings.
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
