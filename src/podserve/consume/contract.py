"""The stream contract: the field names of a request entry and of a result entry.

Request entry (XADD <stream> * id <request id> model <name> body <json> [api <api>]):
    id      the caller's request id; results are keyed by it (one result per id)
    model   the served model's name (`name` or `name/version`)
    body    the request as JSON: an Open Inference Protocol v2 inference request, or an
            OpenAI body (embeddings, completions, chat completions) as `api` says
    api     `v2` (default) | `openai.embeddings` | `openai.completions` | `openai.chat`

Result entry (on the results stream):
    id      the request's id
    status  the HTTP status the server would have answered (200, 400, 404, 503, ...)
    body    the response JSON, or the error object (`{"error": ...}`)

Dead-letter entry (an entry that failed `max_failures` times): the request's fields plus
`entry` (its id on the request stream), `error` and `failures`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

FIELD_ID = "id"
FIELD_MODEL = "model"
FIELD_BODY = "body"
FIELD_API = "api"
FIELD_STATUS = "status"


class Api(enum.StrEnum):
    V2 = "v2"
    OPENAI_EMBEDDINGS = "openai.embeddings"
    OPENAI_COMPLETIONS = "openai.completions"
    OPENAI_CHAT = "openai.chat"


@dataclass(frozen=True, slots=True)
class StreamEntry:
    """One request as read from the stream. `problem` is set (and the rest may be empty)
    when the entry breaks the contract: it is answered with a 400 result, not retried."""

    entry_id: str
    request_id: str
    model: str
    version: str | None
    body: bytes
    api: Api
    problem: str | None = None

    @property
    def enqueued_ms(self) -> int:
        """The entry id's timestamp: when Redis appended it (milliseconds since epoch)."""
        return int(self.entry_id.split("-", 1)[0])


@dataclass(frozen=True, slots=True)
class Result:
    request_id: str
    status: int
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def parse_entry(entry_id: str, fields: Mapping[bytes, bytes]) -> StreamEntry:
    """Read one entry's fields; never raises (a broken entry gets a 400 result)."""

    def text(name: str) -> str:
        return fields.get(name.encode(), b"").decode("utf-8", "replace")

    request_id = text(FIELD_ID) or entry_id  # no id: answer under the entry id
    model, _, version = text(FIELD_MODEL).partition("/")
    body = fields.get(FIELD_BODY.encode(), b"")
    api_text = text(FIELD_API) or Api.V2.value
    problem = None
    if not text(FIELD_ID):
        problem = f"entry {entry_id} has no {FIELD_ID!r} field"
    elif not model:
        problem = f"entry {entry_id} has no {FIELD_MODEL!r} field"
    elif not body:
        problem = f"entry {entry_id} has no {FIELD_BODY!r} field"
    try:
        api = Api(api_text)
    except ValueError:
        api = Api.V2
        problem = problem or (
            f"entry {entry_id}: api {api_text!r} is not one of {', '.join(a.value for a in Api)}"
        )
    return StreamEntry(entry_id, request_id, model, version or None, body, api, problem)
