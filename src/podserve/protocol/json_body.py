"""Parse a JSON request body into a pydantic schema, with the one error shape every
JSON endpoint uses: 400 naming the first field that is wrong.

Work on a list a client sends is bounded before it is done item by item. Pydantic
reports every bad item of a list, and `ValidationError.errors()` builds a dict for each:
a `/v1/completions` prompt of a million token ids, checked against `str | list[str]`,
took 0.4 s to validate and about 3 s more to name its first error, all on the event loop
(5 s of `/healthz` silence; 60 s for a 16 MB body). Threads would not help: pydantic and
orjson hold the GIL while they run. So every list in a request schema is `FailFast`
(validation stops at the first bad item, so a refusal costs O(1) whatever the length),
and a field whose list form has a known largest length or a refused shape is checked on
its length and first item before any item is validated (`token_ids`,
protocol/openai/completions.py), as text prompts are bounded before they are tokenized
(dataplane/prompts.py).

The parse itself is bounded too, before it starts: its cost is in how many values the body
holds more than in its bytes (16.8 MB of empty JSON lists took 3.4-4.2 s in a pod, half a
second with the collector off on the decoding thread, httpedge/decoding.py; the same bytes
as one string, 20 ms). Every value after a container's first follows a comma and every
container opens with a bracket, so `,` `[` `{` counted over the bytes bound the values from
above (strings' own commas and brackets counted too) at C speed: about 1 ms a MB. These
schemas' real bodies hold a few thousand values (2,048 messages at most); past
`MAX_JSON_VALUES` a body is refused unparsed, and a text that long is millions of tokens,
past any model's context.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

import orjson
from pydantic import BaseModel, Field, ValidationError
from pydantic_core import PydanticCustomError

from podserve.core.errors import InvalidInput

Schema = TypeVar("Schema", bound=BaseModel)
Item = TypeVar("Item")

# A list from a client: validation stops at its first bad item (see the module's doc).
FailFastList = Annotated[list[Item], Field(fail_fast=True)]


def over_limit(what: str, actual: int, limit: int) -> PydanticCustomError:
    """The error for a length past its limit, raised by a wrap validator before the
    field's items are validated. A pydantic error, unlike InvalidInput, so `parse_body`
    names the field where it sits (`'parameters.stop'`, not only `'stop'`)."""
    return PydanticCustomError(
        "over_limit",
        "{actual} {what}; at most {limit}",
        {"what": what, "actual": actual, "limit": limit},
    )


MAX_JSON_VALUES = 2_000_000


def too_many_values(body: bytes) -> str | None:
    """Why `body` is refused before it is parsed (more than MAX_JSON_VALUES values, the
    module's doc), or None. The gateway applies the same bound to the bodies it bills."""
    if len(body) <= MAX_JSON_VALUES:  # a shorter body cannot hold more values
        return None
    values = body.count(b",") + body.count(b"[") + body.count(b"{")
    if values <= MAX_JSON_VALUES:
        return None
    return (
        f"request body holds up to {values} JSON values (its ',' '[' and '{{' characters); "
        f"at most {MAX_JSON_VALUES}"
    )


def parse_body(body: bytes, schema: type[Schema]) -> Schema:
    refused = too_many_values(body)
    if refused is not None:
        raise InvalidInput(refused)
    try:
        return schema.model_validate(orjson.loads(body))
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"request body is not valid JSON: {exc}") from None
    except ValidationError as exc:
        # errors() costs one dict per error: bounded because lists fail fast.
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise InvalidInput(f"'{where}': {first['msg']}") from None


def token_ids(items: list[object]) -> bool:
    """Whether a list where text belongs is OpenAI's token-id form (`[1, 2]` or
    `[[1, 2]]`), judged by its first item alone: O(1), whatever the list's length."""
    first = items[0] if items else None
    return isinstance(first, list) or (isinstance(first, int) and not isinstance(first, bool))
