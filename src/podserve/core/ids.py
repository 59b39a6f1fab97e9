"""Request ids: accept the caller's (x-request-id) or make a short random one."""

from __future__ import annotations

import os

_MAX_ID_LENGTH = 128


def new_request_id() -> str:
    return os.urandom(8).hex()


def accept_request_id(candidate: str | None) -> str:
    """Use the client's id when it is printable and of sane length, else make one."""
    if candidate and len(candidate) <= _MAX_ID_LENGTH and candidate.isprintable():
        return candidate
    return new_request_id()
