"""`GET /v1/models`."""

from __future__ import annotations

from collections.abc import Iterable

import orjson


def encode_model_list(names: Iterable[str], created_s: int) -> bytes:
    return orjson.dumps(
        {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "created": created_s, "owned_by": "podserve"}
                for name in names
            ],
        }
    )
