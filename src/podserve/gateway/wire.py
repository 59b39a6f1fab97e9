"""What the gateway reads from a request body, and the OpenAI-style error bodies it sends.

The body is forwarded as the client wrote it, except for the output cap and
`stream_options`, so the gateway reads only the fields that decide the bill; unknown
fields pass through untouched (an upstream may accept more than we know of).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from podserve.config.gateway_fields import MAX_OUTPUT_TOKENS
from podserve.core.ids import accept_request_id
from podserve.protocol.json_body import too_many_values


class Endpoint(StrEnum):
    COMPLETIONS = "completions"
    CHAT = "chat"
    EMBEDDINGS = "embeddings"
    V2 = "v2"


# OpenAI's API takes `n` from 1 to 128 (its API reference, chat and completions).
MAX_CHOICES = 128


class BadRequest(Exception):
    """The client's body cannot be billed: 400 with the message."""


@dataclass(frozen=True, slots=True)
class Billable:
    model: str
    endpoint: Endpoint
    stream: bool
    wants_usage: bool  # the client itself asked for the usage chunk
    max_tokens: int | None
    cap_field: str  # which field carries the output cap: max_tokens | max_completion_tokens
    choices: int
    texts: tuple[str, ...]  # what the prompt counter reads
    token_ids: int  # prompt tokens the client sent as ids (embeddings)
    # chat: tokens a template's pretty-printing adds to the JSON in `texts` (`_rendered`)
    layout_tokens: int = 0
    media_parts: int = 0  # chat: content parts that are not text (images, audio)


# OIP's binary tensor extension: a JSON header of this many bytes, then raw tensors
# (https://github.com/kserve/open-inference-protocol, "Binary Tensor Data Extension").
# The gateway forwards OIP bodies untouched, so the headers that say how to read one go
# with it, and the pod's answer to a request for binary outputs comes back with its own.
BINARY_JSON_LENGTH = b"inference-header-content-length"
V2_BODY_HEADERS = (b"content-type", BINARY_JSON_LENGTH)
# A hosted fallback serves the OpenAI-compatible routes only (forward.Forwarder.send).
NOT_IN_POOLS = "is not served by this gateway's pools (OIP v2 goes to pools only)"

# The gateway's own response headers (docs/gateway.md, "Routes").
OVERHEAD_HEADER = "x-podserve-gateway-overhead-ms"
OVERHEAD = OVERHEAD_HEADER.encode()
UPSTREAM = b"x-podserve-gateway-upstream"
REQUEST_ID = b"x-request-id"


# orjson.loads reads up to 1024 levels of arrays and objects, but orjson.dumps stops at
# 254 (the body's own object counted: a field nested 253 deep is re-encoded, 254 raises
# "Recursion limit reached"). The gateway re-encodes every body it forwards
# (`forwarded_body`), after its reservation: a pass-through field nested deeper was
# admitted, then failed to re-encode (a 500, and the hold kept until its lease charged it
# in full). Such a body is refused with the others that cannot be billed, before
# admission. No request an upstream takes comes near it (a tool schema: tens of levels).
MAX_NESTING_DEPTH = 254


def parse_body(raw: bytes) -> dict[str, Any]:
    refused = too_many_values(raw)  # the pod's bound: such a body is not worth parsing
    if refused is not None:
        raise BadRequest(refused)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"request body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    _refuse_too_deep(raw, body)
    return body


def _refuse_too_deep(raw: bytes, body: dict[str, Any]) -> None:
    """400 for a body `forwarded_body` could not re-encode: nested past MAX_NESTING_DEPTH.

    A body's depth is at most the number of brackets that open a container, counted at C
    speed (strings' brackets too: an over-count only costs the check below); past that,
    the check is the re-encoding itself, also C: about a quarter of the parse's time."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_NESTING_DEPTH:
        return
    try:
        orjson.dumps(body)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        raise BadRequest(
            f"request body exceeds the nesting depth limit: at most {MAX_NESTING_DEPTH} "
            f"levels of arrays and objects ({exc})"
        ) from exc


def _positive_int(body: dict[str, Any], field: str) -> int | None:
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRequest(f"'{field}' must be a positive integer")
    return value


def _choices_per_prompt(body: dict[str, Any]) -> int:
    """The completions generated for each prompt: `n`, or `best_of` when larger (OpenAI's
    legacy completions generate `best_of` server-side and bill every one; vLLM's older
    releases take it on completions and chat)."""
    n = _positive_int(body, "n") or 1
    if n > MAX_CHOICES:
        raise BadRequest(f"'n' must be at most {MAX_CHOICES}")
    best_of = _positive_int(body, "best_of") or 1
    if best_of > MAX_CHOICES:
        raise BadRequest(f"'best_of' must be at most {MAX_CHOICES}")
    return max(n, best_of)


def _batch_choices(per_prompt: int, prompts: int) -> int:
    """A batch's completions in all. Bounded as `n` is: the largest hold stays an exact
    integer in the stores (config/gateway_fields.py, MAX_PRICE_PER_MILLION_USD)."""
    choices = per_prompt * max(prompts, 1)
    if choices > MAX_CHOICES:
        raise BadRequest(
            f"'prompt' holds {prompts} prompts of {per_prompt} completions each "
            f"('n', 'best_of'): at most {MAX_CHOICES} completions a request"
        )
    return choices


def billable(body: dict[str, Any], endpoint: Endpoint) -> Billable:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required and must be a string")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean")
    # Checked here, not left to the upstream: the gateway rewrites stream_options (it
    # forces include_usage), which would turn a malformed value into a valid one.
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise BadRequest("'stream_options' must be an object")
    include_usage = None if options is None else options.get("include_usage")
    if include_usage is not None and not isinstance(include_usage, bool):
        raise BadRequest("'stream_options.include_usage' must be a boolean")
    wants_usage = include_usage is True
    choices = _choices_per_prompt(body)
    cap_field = "max_tokens"
    max_tokens = _positive_int(body, "max_tokens")
    if endpoint is Endpoint.CHAT and body.get("max_completion_tokens") is not None:
        cap_field = "max_completion_tokens"
        max_tokens = _positive_int(body, "max_completion_tokens")
    if max_tokens is not None:
        max_tokens = min(max_tokens, MAX_OUTPUT_TOKENS)
    texts: list[str] = []
    token_ids = layout = media = 0
    if endpoint is Endpoint.CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list")
        if body.get("chat_template") is not None:
            raise BadRequest(
                "'chat_template' is not accepted through the gateway: a template of the "
                "client's own can render the messages into a prompt of any size, which no "
                "budget hold can bound"
            )
        for message in messages:
            if not isinstance(message, dict):
                raise BadRequest("each message must be an object")
            text, parts, separators = _content_text(message.get("content"))
            texts.append(text)
            media += parts
            layout += separators
            role = message.get("role")
            if not (isinstance(role, str) and role in _FRAMED_ROLES):
                layout += _add_rendered(texts, role)
            rendered = {k: v for k, v in message.items() if k not in _MESSAGE_FRAME}
            if rendered:  # tool_calls and their arguments, name, tool_call_id, ...
                layout += _add_rendered(texts, rendered)
        for field in _RENDERED_FIELDS:
            value = body.get(field)
            if value is not None and not isinstance(value, bool):
                layout += _add_rendered(texts, value)
    else:
        field = "prompt" if endpoint is Endpoint.COMPLETIONS else "input"
        value = body.get(field)
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not items:
            raise BadRequest(f"'{field}' must be a string or a non-empty list")
        prompts = 0
        for item in items:
            if isinstance(item, str):
                texts.append(item)
                prompts += 1
            elif isinstance(item, int):
                token_ids += 1
            elif isinstance(item, list) and all(isinstance(t, int) for t in item):
                token_ids += len(item)
                prompts += 1
            else:
                raise BadRequest(f"'{field}' items must be strings or token ids")
        if endpoint is Endpoint.COMPLETIONS:
            # A list of strings or of id lists is a batch: an OpenAI-compatible server
            # generates every choice for each prompt (vLLM: one engine request per prompt,
            # each with `n` outputs, choice index `prompt_idx * n + index`, in
            # vllm/entrypoints/openai/completion/serving.py; OpenAI's legacy completions
            # the same). A flat list of ids is one prompt. Each prompt is counted above.
            prompts += any(isinstance(item, int) for item in items)
            choices = _batch_choices(choices, prompts)
    return Billable(
        model,
        endpoint,
        stream is True,
        wants_usage,
        max_tokens,
        cap_field,
        choices,
        tuple(texts),
        token_ids,
        layout,
        media,
    )


# What a chat template renders into the prompt besides the messages' contents. vLLM (and
# the models' own templates: Llama 3.1, Hermes, Qwen 2.5, Mistral) write the tool
# definitions into the system turn, each assistant turn's tool calls with their arguments,
# a message's name and tool_call_id, RAG `documents`, and pass `chat_template_kwargs` to
# the template; a 2 KB tool schema is hundreds of tokens on every request. Counted, the
# hold covers them; left out, a request's usage could exceed its hold and the budget.
_MESSAGE_FRAME = frozenset({"role", "content"})  # the content is counted on its own
# Roles whose markers `tokens.CHAT_OVERHEAD_PER_MESSAGE` covers (the pod takes these
# only). vLLM takes any string ("Enables custom roles": CustomChatCompletionMessageParam,
# vllm/entrypoints/chat_utils.py) and templates print it (`<|im_start|>{role}`), so any
# other role is counted as text: 800 characters of role were 400 tokens outside the hold.
_FRAMED_ROLES = frozenset({"system", "user", "assistant", "developer", "tool", "function"})
_RENDERED_FIELDS = ("tools", "functions", "documents", "chat_template_kwargs", "tool_choice")
# Templates print this JSON pretty (`tojson(indent=4)` in Llama 3.1's): counted as orjson
# renders it with 2-space indentation, plus 2 tokens a line for the deeper indentation
# (a tokenizer merges a run of spaces into one token or two). With tiny-lm's tokenizer
# that covers the 4-space rendering of a tool schema nested 14 deep (tests); a template
# indenting with tabs, deeper still, would cost more.
_LAYOUT_TOKENS_PER_LINE = 2


def _add_rendered(texts: list[str], value: object) -> int:
    """Add `value` as a template renders it to the texts counted; returns the layout
    tokens it needs on top."""
    if isinstance(value, str):
        texts.append(value)
        return 0
    try:
        text = orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    except TypeError as exc:  # not JSON-serializable: cannot come from a JSON body
        raise BadRequest(f"a chat field could not be read: {exc}") from exc
    texts.append(text)
    return _LAYOUT_TOKENS_PER_LINE * text.count("\n")


# Content parts a server reads as text, and the field holding it (vLLM's MM_PARSER_MAP,
# vllm/entrypoints/chat_utils.py); any other part is media (`mediaPartTokens`).
_TEXT_PARTS = {
    "text": "text",
    "input_text": "text",
    "output_text": "text",
    "refusal": "refusal",
    "thinking": "thinking",
    "tool_reference": "name",
}


def _content_text(content: object) -> tuple[str, int, int]:
    """A message content's text, how many of its parts are not text (an image's tokens
    are the model's to say: `prices.<model>.mediaPartTokens`; its URL or base64 says
    nothing of them), and the tokens to add for the joins between parts.

    Parts are joined as vLLM joins them, with "\n" (`text_prompt = "\n".join(texts)` in
    `_parse_chat_message_content_parts`, media placeholders too): joined with "" (as
    before, and as the pod does) 200 parts of "ab" were held at half what vLLM billed.
    One token a join on top covers the pod's "" join, where the words either side of a
    join may merge into a token sequence one longer than the two apart."""
    if content is None or isinstance(content, str):
        return content or "", 0, 0
    if isinstance(content, list):
        texts: list[str] = []
        media = 0
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise BadRequest(
                    "each part of a message 'content' list must be an object with a 'type'"
                )
            field = _TEXT_PARTS.get(part["type"])
            if field is None:
                media += 1
            else:
                value = part.get(field)
                texts.append(value if isinstance(value, str) else str(value or ""))
        return "\n".join(texts), media, max(len(content) - 1, 0)
    raise BadRequest("message 'content' must be a string, a list of parts, or null")


def forwarded_body(
    body: dict[str, Any],
    bill: Billable,
    granted_max: int | None,
    force_usage: bool,
    model_name: str | None = None,
) -> bytes:
    """The body sent upstream: the granted output cap, usage asked for on streams, and
    the upstream's own name for the model where it has one."""
    out = dict(body)
    if model_name is not None:
        out["model"] = model_name
    if granted_max is not None:
        out[bill.cap_field] = granted_max
    if force_usage:
        options = out.get("stream_options")
        out["stream_options"] = {
            **(options if isinstance(options, dict) else {}),
            "include_usage": True,
        }
    return orjson.dumps(out)


class ErrorType(StrEnum):
    INVALID = "invalid_request_error"
    AUTH = "authentication_error"
    PERMISSION = "permission_error"
    RATE = "rate_limit_exceeded"
    BUDGET = "insufficient_quota"
    UNAVAILABLE = "service_unavailable"
    SERVER = "server_error"  # OpenAI's own for its 500s (the pods' too: server/errors.py)


# 429 is not here: its type depends on which limit refused (OverLimit says).
_TYPE_OF_STATUS = {
    401: ErrorType.AUTH,
    403: ErrorType.PERMISSION,
    502: ErrorType.UNAVAILABLE,
    503: ErrorType.UNAVAILABLE,
    504: ErrorType.UNAVAILABLE,
}


def error_type(status: int) -> ErrorType:
    """The error type of a refusal known only by its status (the edge's 404, 405, 500):
    a server fault must not read as the client's `invalid_request_error`."""
    found = _TYPE_OF_STATUS.get(status)
    if found is not None:
        return found
    return ErrorType.SERVER if status >= 500 else ErrorType.INVALID


def error_body(message: str, kind: ErrorType, code: str | None = None) -> bytes:
    """OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""
    return orjson.dumps(
        {"error": {"message": message, "type": kind.value, "param": None, "code": code}}
    )


def oip_error_body(message: str) -> bytes:
    """OIP's (and the pods'): {"error": "<message>"}. tritonclient reads `error` as a
    string; given OpenAI's object it could not even print its exception (str + dict)."""
    return orjson.dumps({"error": message})


def is_oip(path: str) -> bool:
    return path.startswith("/v2")


def request_id(given: str | None) -> str:
    """The client's x-request-id when the pods would take it too (core.ids), and ASCII:
    the gateway forwards it upstream as a header and writes it to the ledger."""
    return accept_request_id(given if given is not None and given.isascii() else None)
