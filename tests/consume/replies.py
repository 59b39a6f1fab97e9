"""Stream replies as these tests receive them. redis-py types them loosely (one union
over RESP2/RESP3, decoded and raw replies); with RESP2 and bytes (no
`decode_responses`), which is how the tests connect, their shapes are these
(https://redis.io/docs/latest/commands/xread/, .../xrange/, .../xpending/)."""

from __future__ import annotations

from typing import TypedDict, cast

Fields = dict[bytes, bytes]
Entry = tuple[bytes, Fields]  # (entry id, fields)


class Pending(TypedDict):
    """One row of XPENDING's extended form, as redis-py parses it."""

    message_id: bytes
    consumer: bytes
    time_since_delivered: int
    times_delivered: int


def entries(reply: object) -> list[Entry]:
    """XRANGE: the entries in order."""
    return cast(list[Entry], reply)


def streams(reply: object) -> list[tuple[bytes, list[Entry]]]:
    """XREAD / XREADGROUP: per stream, its entries (None when a block timed out)."""
    return cast(list[tuple[bytes, list[Entry]]], reply or [])


def pending(reply: object) -> list[Pending]:
    """XPENDING with a range."""
    return cast(list[Pending], reply)
