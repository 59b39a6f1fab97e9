"""Triton's generate extension over the continuous-batching engine: a plain-text LLM
endpoint for clients of Triton's and KServe's v2 protocol. Admission, drain and metrics
are the generation path's own, as for the OpenAI routes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from podserve.core.errors import PodserveError
from podserve.dataplane.dataplane import DataPlane
from podserve.dataplane.streams import GenerationStream
from podserve.protocol.v2.generate import (
    decode_generate_request,
    generate_body,
    generate_error_event,
    generate_event,
)
from podserve.server import streams as streams_io
from podserve.server.http import Request, Response, StreamingResponse
from podserve.server.sampling import sampling_params


class GenerateRoutes:
    def __init__(self, dataplane: DataPlane) -> None:
        self._dataplane = dataplane
        self._max_body_bytes = dataplane.settings.max_body_bytes

    async def generate(self, request: Request) -> Response:
        stream, version = await self._start(request)
        async with contextlib.aclosing(stream):
            text, finish, _ = await streams_io.collect(stream)
        return Response(200, generate_body(request.model, version, text, finish))

    async def generate_stream(self, request: Request) -> StreamingResponse:
        stream, version = await self._start(request)
        return StreamingResponse(
            200,
            self._events(stream, request.model, version),
            content_type=b"text/event-stream; charset=utf-8",
        )

    async def _start(self, request: Request) -> tuple[GenerationStream, str]:
        # An unknown model is a 404 before its body costs any decoding.
        self._dataplane.repository.entry(request.model, request.path_params.get("version"))
        parsed = decode_generate_request(await request.body(self._max_body_bytes))
        worker = await self._dataplane.generative_worker(request.model)
        prompt_ids = worker.executor.encode_prompt(parsed.text_input)
        params = sampling_params(parsed.parameters, max_tokens=parsed.parameters.max_tokens)
        (stream,) = self._dataplane.generate(worker, prompt_ids, [params])
        return stream, worker.version

    async def _events(
        self, stream: GenerationStream, model: str, version: str
    ) -> AsyncIterator[bytes]:
        async with contextlib.aclosing(stream):
            try:
                async for event in stream:
                    finish = None
                    if event.finish_reason is not None:
                        finish = streams_io.finish_reason(event)
                    if event.text or finish is not None:
                        yield generate_event(model, version, event.text, finish)
            except PodserveError as exc:
                yield generate_error_event(exc.message)
