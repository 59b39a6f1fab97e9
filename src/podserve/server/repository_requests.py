"""What a repository-extension load or unload request may carry, for REST and gRPC alike.

The body of `POST /v2/repository/models/{m}/load|unload` is empty or a JSON object
`{"parameters": {...}}` (KServe / Triton's repository extension); other top-level members
are ignored, as the inference decoder ignores them (protocol/v2/decode.py). Triton's load
parameters override the model's config or upload its files; podserve loads from its
configured repository only, so they are refused, not ignored. The one parameter taken is
`unload_dependents`, which tritonclient's `unload_model` always sends: podserve has no
ensembles, so there are no dependents and its value changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import orjson

from podserve.core.errors import InvalidInput
from podserve.protocol.v2.json_data import json_type

Action = Literal["load", "unload"]

ALLOWED_PARAMETERS: dict[Action, frozenset[str]] = {
    "load": frozenset(),
    "unload": frozenset({"unload_dependents"}),
}

# A body that could be accepted is a few dozen bytes; anything bigger carries model files
# (Triton's `file:` parameters), which are refused anyway, so it is not read in full: the
# REST routes read at most server/http.py's CONTROL_BODY_BYTES of it.


def refuse_parameters(names: Iterable[str], action: Action) -> None:
    """Raise InvalidInput naming every parameter `action` does not take."""
    unsupported = sorted(set(names) - ALLOWED_PARAMETERS[action])
    if unsupported:
        raise InvalidInput(f"{action} parameters are not supported: {', '.join(unsupported)}")


def check_body(body: bytes, action: Action) -> None:
    """Raise InvalidInput unless `body` is a load or unload request podserve can honour."""
    if not body.strip():
        return
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"request body is not valid JSON: {exc}") from None
    if type(doc) is not dict:
        raise InvalidInput(f"request body must be a JSON object, got {json_type(doc)}")
    parameters = doc.get("parameters", {})
    if type(parameters) is not dict:
        raise InvalidInput(f"'parameters' must be a JSON object, got {json_type(parameters)}")
    refuse_parameters(parameters, action)


__all__ = ["ALLOWED_PARAMETERS", "Action", "check_body", "refuse_parameters"]
