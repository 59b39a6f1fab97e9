"""Parse a JSON request body into a pydantic schema, with the one error shape every
JSON endpoint uses: 400 naming the first field that is wrong."""

from __future__ import annotations

from typing import TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from podserve.core.errors import InvalidInput

Schema = TypeVar("Schema", bound=BaseModel)


def parse_body(body: bytes, schema: type[Schema]) -> Schema:
    try:
        return schema.model_validate(orjson.loads(body))
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"request body is not valid JSON: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise InvalidInput(f"'{where}': {first['msg']}") from None
