"""A request body parsed and read for billing, off the event loop when it is big.

The client chooses the body's shape, and its cost is in the shape more than the size: a
4 MiB `prompt` of a million one-id lists kept `/healthz` waiting 0.8 s on the gateway's
loop (orjson building a million lists, then `billable` checking each), 3 s at the 16 MiB
`maxBodyBytes`. Bodies past 64 KiB (`INLINE_BYTES`) are parsed, checked and re-encoded on one
thread, with the cyclic collector off meanwhile (the pod's decoding thread, shared:
httpedge/decoding.py): parsing is C code that holds the GIL, but the check and the walk
are Python, which gives the loop its turn every switch interval (5 ms), and one thread
means one such body at a time (the Python objects of a pathological 16 MiB body take
~500 MB). A small body is parsed on the loop: a hop to a thread and back costs more than
that.
"""

from __future__ import annotations

from typing import Any

from podserve.gateway.wire import Billable, Endpoint, billable, parse_body
from podserve.httpedge.decoding import BodyDecoding


def _parse(raw: bytes, endpoint: Endpoint) -> tuple[dict[str, Any], Billable]:
    body = parse_body(raw)
    return body, billable(body, endpoint)


class BodyParser(BodyDecoding):
    """`run(size, work, ...)` puts a body's work on the loop or the parsing thread."""

    def __init__(self) -> None:
        super().__init__("podserve-gw-parse")

    async def parse(self, raw: bytes, endpoint: Endpoint) -> tuple[dict[str, Any], Billable]:
        """The body, and what it bills; BadRequest names what is wrong with it."""
        return await self.run(len(raw), _parse, raw, endpoint)
