"""What a non-streamed upstream response reports it used, read without parsing a large body.

Settlement needs only the response's `usage` object, and the client chooses how large the
response is (an embeddings request of 2,048 inputs answers with 15 MB of JSON). orjson
held the event loop for 49 ms parsing such a body here, and a thread would not help: the
parse is one C call under the GIL. So past `FULL_PARSE_MAX_BYTES` only the `usage` object
is parsed, found from the end: OpenAI-compatible servers (vLLM, OpenAI, podserve) put it
after `data`/`choices`, and the byte sequence `"usage"` followed by `:` cannot occur
inside a JSON string (its quotes would be escaped), only as a key.

A response that reports no usage (or whose usage cannot be read, or, for completions and
chat, does not count what it generated) is charged what its reservation held: the prompt
and the whole output cap. That never undercharges. A count that is not a count (negative,
a bool, a float) or past `MAX_REPORTED_TOKENS` makes the usage unreadable: a negative
count credited the budget, and one past 2**63 overflowed SQLite's integers and failed the
settlements committed with it.
"""

from __future__ import annotations

from typing import Any

import orjson

from podserve.gateway.budget import Usage

FULL_PARSE_MAX_BYTES = 64 * 1024
# No request comes near 4 billion tokens; at the dearest price the config allows (10,000
# USD per million) a cost from counts below this fits a 64-bit integer many times over.
MAX_REPORTED_TOKENS = 2**32 - 1
_USAGE_OBJECT_MAX_BYTES = 4096  # usage and its *_tokens_details: a few hundred bytes


def held_usage(prompt_tokens: int, max_tokens: int | None, choices: int) -> Usage:
    """What a reservation held: the prompt and every choice's whole output cap."""
    return Usage(prompt_tokens, (max_tokens or 0) * choices)


def billed_usage(content: bytes, prompt_tokens: int, max_tokens: int | None, choices: int) -> Usage:
    """A successful non-streamed response's usage: as the upstream reports it, else what
    the reservation held (never less than it could have generated). A request with an
    output cap generates (completions, chat: the gateway always forwards one), so its
    usage must say what it generated."""
    reported = reported_usage(content, generates=max_tokens is not None)
    return reported if reported is not None else held_usage(prompt_tokens, max_tokens, choices)


def reported_usage(content: bytes, generates: bool = False) -> Usage | None:
    """The upstream's usage, when it reports one (prompt_tokens an int; `usage_of`)."""
    usage: Any
    if len(content) > FULL_PARSE_MAX_BYTES:
        usage = _usage_from_the_end(content)
    else:
        try:
            payload = orjson.loads(content)
        except orjson.JSONDecodeError:
            return None
        usage = payload.get("usage") if isinstance(payload, dict) else None
    return usage_of(usage, generates=generates)


def usage_of(usage: object, *, generates: bool) -> Usage | None:
    """A `usage` object's counts, or None when they cannot be trusted: `prompt_tokens`
    must be a count, and so must `completion_tokens` for a request that `generates`
    (completions, chat). Only where nothing is generated (embeddings, which OpenAI
    reports without the key) is a missing or null one 0: taken for 0 on a completion, a
    usage of `prompt_tokens` alone made every generated token free."""
    if not isinstance(usage, dict):
        return None
    prompt = _count(usage.get("prompt_tokens"))
    given = usage.get("completion_tokens")
    completion = 0 if given is None and not generates else _count(given)
    if prompt is None or completion is None:
        return None
    return Usage(prompt, completion)


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REPORTED_TOKENS:
        return value
    return None


def _usage_from_the_end(content: bytes) -> object:
    key = content.rfind(b'"usage"')
    if key < 0:
        return None
    at = _skip_space(content, key + len(b'"usage"'))
    if content[at : at + 1] != b":":
        return None
    start = _skip_space(content, at + 1)
    end = _object_end(content, start)
    if end is None:
        return None
    try:
        return orjson.loads(content[start:end])
    except orjson.JSONDecodeError:
        return None


def _skip_space(content: bytes, at: int) -> int:
    while content[at : at + 1] in (b" ", b"\t", b"\n", b"\r"):
        at += 1
    return at


def _object_end(content: bytes, start: int) -> int | None:
    """The index just past the JSON object that opens at `start` (strings respected),
    or None when there is none within `_USAGE_OBJECT_MAX_BYTES`."""
    if content[start : start + 1] != b"{":
        return None
    depth = 0
    in_string = escaped = False
    stop = min(len(content), start + _USAGE_OBJECT_MAX_BYTES)
    for i in range(start, stop):
        c = content[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:  # backslash
                escaped = True
            elif c == 0x22:  # quote
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c == 0x7B:  # {
            depth += 1
        elif c == 0x7D:  # }
            depth -= 1
            if depth == 0:
                return i + 1
    return None
