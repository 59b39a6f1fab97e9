"""OpenAI-compatible routes. Requests become data-plane requests, so admission, batching,
drain and metrics apply unchanged; errors use OpenAI's error object. A big body is decoded
off the event loop (httpedge/decoding.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from podserve.core.errors import InvalidInput, PodserveError
from podserve.dataplane import CallContext, DataPlane, GenerateRequest, Generation
from podserve.generation.sampling import UNTIL_CONTEXT_FULL, SamplingParams, choice_params
from podserve.generation.stream import TokenEvent
from podserve.httpedge.decoding import BodyDecoding
from podserve.protocol.openai import completions as oai
from podserve.protocol.openai import (
    decode_embedding_request,
    encode_embedding_response,
    split_embedding_request,
)
from podserve.server import streams as streams_io
from podserve.server.errors import openai_error
from podserve.server.http import Request, Response, StreamingResponse


class OpenAIRoutes:
    def __init__(self, dataplane: DataPlane, decoding: BodyDecoding) -> None:
        self._dataplane = dataplane
        self._decoding = decoding
        self._max_body_bytes = dataplane.edge.max_body_bytes

    async def embeddings(self, request: Request) -> Response:
        body = await request.body(self._max_body_bytes)
        parsed, infer_request = await self._decoding.run(len(body), decode_embedding_request, body)
        request.model = parsed.model
        # OpenAI takes up to 2,048 inputs a request; a batching model takes max_batch_size
        # rows a call. Each part is a request of its own on the data plane (admission,
        # deadline and metrics apply to each), run concurrently and joined in order.
        parts = split_embedding_request(infer_request, self._batch_rows(parsed.model))
        tasks = [
            asyncio.ensure_future(self._dataplane.infer(part, _call(request, "openai.embeddings")))
            for part in parts
        ]
        try:
            responses = await asyncio.gather(*tasks)
        finally:  # one part failed, or the client left: the others are not wanted
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        embeddings, tokens = [], []
        for response in responses:
            outputs = {t.name: t.data for t in response.outputs}
            if "embedding" not in outputs or "tokens" not in outputs:
                raise InvalidInput(
                    f"model {parsed.model!r} is not an embedding model (it returns "
                    f"{sorted(outputs)}, not 'embedding' and 'tokens')"
                )
            embeddings.append(outputs["embedding"])
            tokens.append(outputs["tokens"])
        return Response(
            200,
            encode_embedding_response(
                parsed, np.concatenate(embeddings), np.concatenate(tokens).reshape(-1)
            ),
        )

    def _batch_rows(self, model: str) -> int:
        """The most rows the model takes in one call (0: no limit, it does not batch).
        A model the data plane cannot describe is left to `infer` to refuse, in its
        own words."""
        try:
            return self._dataplane.model_config(model).max_batch_size
        except PodserveError:
            return 0

    # --- generation ------------------------------------------------------------------------
    async def completions(self, request: Request) -> Response | StreamingResponse:
        body = await request.body(self._max_body_bytes)
        parsed = await self._decoding.run(
            len(body), oai.decode_request, body, oai.CompletionRequest
        )
        request.model = parsed.model
        # OpenAI's documented default for completions is 16 tokens; lowered to what the
        # context leaves, so a prompt that fits is never refused for a default.
        params = _params(parsed, parsed.max_tokens, default=16)
        generation = await self._dataplane.generate(
            GenerateRequest(
                model=parsed.model,
                prompt=parsed.prompt_text(),
                sequences=choice_params(params, parsed.n),
            ),
            _call(request, "openai.completions"),
        )
        return await self._respond(parsed, generation, params, chat=False)

    async def chat_completions(self, request: Request) -> Response | StreamingResponse:
        body = await request.body(self._max_body_bytes)
        parsed, messages = await self._decoding.run(len(body), _decode_chat, body)
        request.model = parsed.model
        # Chat without a limit generates until EOS, the model's cap or a full context,
        # as OpenAI's and vLLM's do (vLLM's default: context minus prompt).
        params = _params(parsed, parsed.token_limit, default=UNTIL_CONTEXT_FULL)
        generation = await self._dataplane.generate(
            GenerateRequest(
                model=parsed.model, messages=messages, sequences=choice_params(params, parsed.n)
            ),
            _call(request, "openai.chat"),
        )
        return await self._respond(parsed, generation, params, chat=True)

    async def _respond(
        self,
        parsed: oai.CompletionRequest | oai.ChatRequest,
        generation: Generation,
        params: SamplingParams,
        *,
        chat: bool,
    ) -> Response | StreamingResponse:
        # Admitted: every refusal has been raised already, so the status is 200 from here.
        streams = generation.streams
        rid = oai.new_id("chatcmpl" if chat else "cmpl")
        if parsed.stream:
            return StreamingResponse(200, self._sse(generation, parsed, rid, chat))
        tasks = [asyncio.ensure_future(streams_io.collect(s)) for s in streams]
        try:
            results = await asyncio.gather(*tasks)
        finally:  # one choice failed, or the client left: end them all
            await streams_io.close_all(streams, tasks)
        echo = parsed.echo_text()
        choices = []
        for text, finish, tokens in results:
            text = echo + text
            logprobs = None
            if params.logprobs is not None:
                entries = [_logprob_entry(generation, event) for event in tokens]
                logprobs = _logprobs_object(entries, params, chat)
            choices.append(oai.Choice(text, finish, logprobs))
        use = oai.usage(generation.prompt_tokens, sum(len(tokens) for _, _, tokens in results))
        body = (oai.chat_body if chat else oai.completion_body)(rid, parsed.model, choices, use)
        return Response(200, body)

    async def _sse(
        self,
        generation: Generation,
        parsed: oai.CompletionRequest | oai.ChatRequest,
        rid: str,
        chat: bool,
    ) -> AsyncIterator[bytes]:
        streams = generation.streams
        created = int(time.time())
        model = parsed.model
        generated = 0
        with_top = bool(parsed.logprob_count())
        text_offsets = [0] * len(streams)
        async with contextlib.aclosing(streams_io.merged(streams)) as events:
            if chat:
                for index in range(len(streams)):
                    role = {"role": "assistant", "content": ""}
                    yield oai.chat_chunk(rid, model, created, role, None, index=index)
            elif echo := parsed.echo_text():  # the prompt first, as vLLM streams an echo
                for index in range(len(streams)):
                    yield oai.completion_chunk(rid, model, created, echo, None, index=index)
            try:
                async for index, event in events:
                    generated += event.token_id is not None
                    finish = (
                        streams_io.finish_reason(event) if event.finish_reason is not None else None
                    )
                    # One chunk per token, even when its text is empty (held back for a
                    # possible stop string, or half a UTF-8 character): clients time the
                    # first token, and streams keep a steady rhythm, as vLLM's do.
                    if event.token_id is None and finish is None:
                        continue
                    entry = _logprob_entry(generation, event)
                    if chat:
                        delta = {"content": event.text} if event.text or not finish else {}
                        logprobs = oai.chat_logprobs([entry]) if entry else None
                        yield oai.chat_chunk(
                            rid, model, created, delta, finish, logprobs, index=index
                        )
                    else:
                        logprobs = None
                        if entry is not None:
                            logprobs = oai.completion_logprobs(
                                [entry], first_offset=text_offsets[index], with_top=with_top
                            )
                            text_offsets[index] += len(entry.token)
                        yield oai.completion_chunk(
                            rid, model, created, event.text, finish, logprobs, index=index
                        )
            except PodserveError as exc:
                # The status line is gone already: report the error as the last event.
                yield oai.sse(openai_error(exc))
                yield oai.SSE_DONE
                return
        if parsed.include_usage:
            obj = "chat.completion.chunk" if chat else "text_completion"
            use = oai.usage(generation.prompt_tokens, generated)
            yield oai.usage_chunk(rid, model, created, obj, use)
        yield oai.SSE_DONE


def _call(request: Request, endpoint: str) -> CallContext:
    # the header is passed unparsed: the data plane validates it, for every edge alike
    return CallContext(
        endpoint=endpoint,
        request_id=request.request_id,
        timeout_ms=request.header("x-request-timeout-ms"),
    )


def _decode_chat(body: bytes) -> tuple[oai.ChatRequest, list[dict[str, str]]]:
    """The request, and its messages as the chat template takes them: both cost in
    proportion to the body, so both run where the body is decoded."""
    parsed = oai.decode_request(body, oai.ChatRequest)
    return parsed, parsed.chat()


def _params(
    parsed: oai.CompletionRequest | oai.ChatRequest, max_tokens: int | None, *, default: int
) -> SamplingParams:
    return SamplingParams.from_fields(
        parsed,
        max_tokens=max_tokens or default,
        logprobs=parsed.logprob_count(),
        logit_bias=parsed.logit_biases(),
        fit_context=max_tokens is None,
    )


def _logprob_entry(generation: Generation, event: TokenEvent) -> oai.LogprobEntry | None:
    if event.logprob is None or event.token_id is None:
        return None
    text = generation.token_text
    return oai.LogprobEntry(
        text(event.token_id),
        event.logprob.logprob,
        tuple((text(token), logprob) for token, logprob in event.logprob.top),
    )


def _logprobs_object(
    tokens: list[oai.LogprobEntry | None], params: SamplingParams, chat: bool
) -> dict[str, Any]:
    entries = [e for e in tokens if e is not None]
    if chat:
        return oai.chat_logprobs(entries)
    return oai.completion_logprobs(entries, with_top=bool(params.logprobs))
