"""`POST /v1/completions` and `POST /v1/chat/completions`: request schemas, and the JSON
and server-sent-event bodies of their responses (OpenAI's shapes, which the openai SDK
parses)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidatorFunctionWrapHandler, WrapValidator

from podserve.core.errors import InvalidInput
from podserve.protocol.json_body import FailFastList, over_limit, parse_body, token_ids
from podserve.protocol.sampling import LOGIT_BIAS_MAX, MAX_LOGIT_BIASES, SamplingFields

FinishReason = Literal["stop", "length"]
MAX_LOGPROBS = 20  # alternatives per token (OpenAI's top_logprobs limit, vLLM's default)
# Choices per request (`n`): each is a sequence of its own in the engine, so a large n is
# a large request; past this, send several requests.
MAX_CHOICES = 16
# A chat's messages, and the content parts of all of them, counted before any is validated
# (protocol/json_body.py). Generous: 2,048 is OpenAI's documented limit on an embeddings
# request's inputs, and a chat that long outgrows most contexts anyway (every message adds
# its chat template's tokens). At both limits a chat validates in about 4 ms.
MAX_MESSAGES = 2048
MAX_CONTENT_PARTS = 8192


@dataclass(frozen=True, slots=True)
class Choice:
    """One finished choice of a non-streamed response."""

    text: str
    finish: str
    logprobs: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class LogprobEntry:
    """One generated token as text, its log-probability, and the likeliest alternatives."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    include_usage: bool = False


def _bounded_bias(value: object, validate: ValidatorFunctionWrapHandler) -> object:
    """OpenAI's logit_bias: at most 300 tokens, counted before any is validated."""
    if isinstance(value, dict) and len(value) > MAX_LOGIT_BIASES:
        raise over_limit("logit_bias tokens", len(value), MAX_LOGIT_BIASES)
    return validate(value)


class _Sampling(SamplingFields):
    model: str
    max_tokens: int | None = Field(None, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=MAX_CHOICES)
    # token id (a JSON object's keys are strings) -> bias in [-100, 100]
    logit_bias: Annotated[
        dict[str, Annotated[float, Field(ge=-LOGIT_BIAS_MAX, le=LOGIT_BIAS_MAX)]] | None,
        WrapValidator(_bounded_bias),
    ] = None

    def check_supported(self) -> None:
        """Combinations the schema alone cannot refuse."""
        if self.stream_options is not None and not self.stream:
            # vLLM's words: "Stream options can only be defined when `stream=True`."
            raise InvalidInput("'stream_options' can only be set when 'stream' is true")

    def echo_text(self) -> str:
        """What comes before a choice's text: the prompt, for a completion that asked
        for it back (`echo`); nothing for chat."""
        return ""

    def logit_biases(self) -> tuple[tuple[int, float], ...]:
        """logit_bias as (token id, bias); the ids are checked against the model's
        vocabulary at admission (generation/worker.py)."""
        if not self.logit_bias:
            return ()
        biases = []
        for key, bias in self.logit_bias.items():
            if not (key.isascii() and key.isdigit()):
                raise InvalidInput(f"'logit_bias': key {key!r} is not a token id")
            biases.append((int(key), bias))
        return tuple(biases)

    def logprob_count(self) -> int | None:
        """None: no log-probabilities; k: each token's and its k likeliest alternatives."""
        return None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


def _one_prompt(value: object, validate: ValidatorFunctionWrapHandler) -> object:
    """A list prompt is refused on its first item and its length before any item is
    validated, as a text prompt is bounded before it is tokenized (dataplane/prompts.py):
    a million token ids cost 5 s of event loop when pydantic checked each one against
    `str` (protocol/json_body.py). Token ids are not taken at all (the engine is fed
    text), so their refusal does not depend on the model's context. InvalidInput is not
    a ValueError: pydantic lets it through unchanged, message and all."""
    if isinstance(value, list):
        if token_ids(value):
            raise InvalidInput(
                "'prompt' as token ids is not supported; send the text (a string, or a "
                "list of one string)"
            )
        if len(value) != 1:
            raise InvalidInput("'prompt' as a list must hold exactly one string (n=1 batching)")
    return validate(value)


class CompletionRequest(_Sampling):
    prompt: Annotated[str | list[str], WrapValidator(_one_prompt)]
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False
    # Taken only to be refused by name when set (check_supported), never ignored.
    suffix: str | None = None
    best_of: int | None = None

    def check_supported(self) -> None:
        super().check_supported()
        if self.suffix:
            raise InvalidInput("'suffix' is not supported (no model here does insertion)")
        if self.best_of is not None and self.best_of not in (1, self.n):
            raise InvalidInput(
                f"'best_of' {self.best_of} is not supported: send null, 1 or n (vLLM's V1 "
                "engine refuses best_of too); to pick among choices, send n and rank them"
            )
        if self.echo and self.logprobs is not None:
            raise InvalidInput(
                "'echo' with 'logprobs' is not supported (the prompt's log-probabilities are "
                "not computed); send one of them"
            )

    def logprob_count(self) -> int | None:
        return self.logprobs

    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]

    def echo_text(self) -> str:
        return self.prompt_text() if self.echo else ""


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | FailFastList[dict[str, Any]] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if part.get("type") != "text":
                raise InvalidInput(
                    f"message content part of type {part.get('type')!r} is not supported"
                )
            text = part.get("text")
            if not isinstance(text, str):  # `"text": 5` or none at all: a client's bug
                raise InvalidInput("'content': a text part needs 'text', a string")
            parts.append(text)
        return "".join(parts)


def _bounded_messages(value: object, validate: ValidatorFunctionWrapHandler) -> object:
    """Past MAX_MESSAGES, or MAX_CONTENT_PARTS in all, refused unread: one error whatever
    the list holds (100,000 valid messages cost 0.4 s of event loop before)."""
    if isinstance(value, list):
        if len(value) > MAX_MESSAGES:
            raise over_limit("messages", len(value), MAX_MESSAGES)
        parts = sum(
            len(m["content"])
            for m in value
            if isinstance(m, dict) and isinstance(m.get("content"), list)
        )
        if parts > MAX_CONTENT_PARTS:
            raise over_limit("content parts in all messages", parts, MAX_CONTENT_PARTS)
    return validate(value)


class ChatRequest(_Sampling):
    messages: Annotated[FailFastList[ChatMessage], WrapValidator(_bounded_messages)] = Field(
        min_length=1
    )
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    # Taken only to be refused by name when they ask for what is not done here
    # (check_supported): a 200 that ignored them would look like the model's answer.
    response_format: dict[str, Any] | None = None
    tools: list[Any] | None = None
    functions: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    function_call: str | dict[str, Any] | None = None

    def check_supported(self) -> None:
        super().check_supported()
        if self.top_logprobs is not None and not self.logprobs:
            raise InvalidInput("'top_logprobs' requires 'logprobs': true")
        if self.response_format is not None and self.response_format.get("type") != "text":
            raise InvalidInput(
                f"'response_format' of type {self.response_format.get('type')!r} is not "
                'supported (no structured output here); send {"type": "text"} or none'
            )
        # No tool parser for these models: a tool call could never be returned.
        if self.tools and self.tool_choice != "none":
            raise InvalidInput(
                "'tools' are not supported (no tool-call parser for this model) unless "
                "'tool_choice' is \"none\""
            )
        if self.functions and self.function_call != "none":
            raise InvalidInput(
                "'functions' are not supported (no tool-call parser for this model) unless "
                "'function_call' is \"none\""
            )

    def logprob_count(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def chat(self) -> list[dict[str, str]]:
        return [
            {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
            for m in self.messages
        ]

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


Request = TypeVar("Request", bound=_Sampling)


def decode_request(body: bytes, schema: type[Request]) -> Request:
    parsed = parse_body(body, schema)
    parsed.check_supported()
    return parsed


# --- responses -------------------------------------------------------------------------------
def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion_logprobs(
    entries: list[LogprobEntry], *, first_offset: int = 0, with_top: bool = True
) -> dict[str, Any]:
    """The legacy completions `logprobs` object; `text_offset` counts from `first_offset`."""
    offsets = []
    offset = first_offset
    for entry in entries:
        offsets.append(offset)
        offset += len(entry.token)
    return {
        "tokens": [e.token for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [dict(e.top) for e in entries] if with_top else None,
        "text_offset": offsets,
    }


def chat_logprobs(entries: list[LogprobEntry]) -> dict[str, Any]:
    """The chat `logprobs` object: `content`, one item per token."""

    def item(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    return {
        "content": [
            {**item(e.token, e.logprob), "top_logprobs": [item(t, lp) for t, lp in e.top]}
            for e in entries
        ],
        "refusal": None,
    }


def completion_body(rid: str, model: str, choices: list[Choice], use: dict[str, int]) -> bytes:
    return orjson.dumps(
        {
            "id": rid,
            "object": "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": i, "text": c.text, "logprobs": c.logprobs, "finish_reason": c.finish}
                for i, c in enumerate(choices)
            ],
            "usage": use,
        }
    )


def chat_body(rid: str, model: str, choices: list[Choice], use: dict[str, int]) -> bytes:
    return orjson.dumps(
        {
            "id": rid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": c.text},
                    "logprobs": c.logprobs,
                    "finish_reason": c.finish,
                }
                for i, c in enumerate(choices)
            ],
            "usage": use,
        }
    )


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def completion_chunk(
    rid: str,
    model: str,
    created: int,
    text: str,
    finish: str | None,
    logprobs: dict[str, Any] | None = None,
    index: int = 0,
) -> bytes:
    return sse(
        {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [
                {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}
            ],
        }
    )


def chat_chunk(
    rid: str,
    model: str,
    created: int,
    delta: dict[str, str],
    finish: str | None,
    logprobs: dict[str, Any] | None = None,
    index: int = 0,
) -> bytes:
    return sse(
        {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [
                {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
            ],
        }
    )


def usage_chunk(rid: str, model: str, created: int, obj: str, use: dict[str, int]) -> bytes:
    return sse(
        {"id": rid, "object": obj, "created": created, "model": model, "choices": [], "usage": use}
    )
