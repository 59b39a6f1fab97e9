"""Triton's generate extension over the data plane's text generation: a plain-text LLM
endpoint for clients of Triton's and KServe's v2 protocol. Admission happens in
`DataPlane.generate`, before the status line; the stream only drains what it admitted."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from podserve.core.errors import PodserveError
from podserve.dataplane import CallContext, DataPlane, GenerateRequest, Generation
from podserve.generation.sampling import SamplingParams
from podserve.httpedge.decoding import BodyDecoding
from podserve.protocol.v2.generate import (
    decode_generate_request,
    generate_body,
    generate_error_event,
    generate_event,
)
from podserve.server import streams as streams_io
from podserve.server.http import Request, Response, StreamingResponse


class GenerateRoutes:
    def __init__(self, dataplane: DataPlane, decoding: BodyDecoding) -> None:
        self._dataplane = dataplane
        self._decoding = decoding
        self._max_body_bytes = dataplane.edge.max_body_bytes

    async def generate(self, request: Request) -> Response:
        generation = await self._start(request, "v2.generate")
        (stream,) = generation.streams
        async with contextlib.aclosing(stream):
            text, finish, _ = await streams_io.collect(stream)
        return Response(200, generate_body(request.model, generation.version, text, finish))

    async def generate_stream(self, request: Request) -> StreamingResponse:
        generation = await self._start(request, "v2.generate_stream")
        return StreamingResponse(
            200,
            self._events(generation, request.model),
            content_type=b"text/event-stream; charset=utf-8",
        )

    async def _start(self, request: Request, endpoint: str) -> Generation:
        version = request.path_params.get("version")
        # An unknown model is a 404 before its body costs any decoding.
        self._dataplane.check_model(request.model, version)
        body = await request.body(self._max_body_bytes)
        # a big body off the event loop (httpedge/decoding.py)
        parsed = await self._decoding.run(len(body), decode_generate_request, body)
        params = SamplingParams.from_fields(
            parsed.parameters, max_tokens=parsed.parameters.max_tokens
        )
        return await self._dataplane.generate(
            GenerateRequest(
                model=request.model,
                version=version,
                prompt=parsed.text_input,
                sequences=(params,),
                parameters=parsed.parameters.request_parameters(),
            ),
            CallContext(
                endpoint=endpoint,
                request_id=request.request_id,
                timeout_ms=request.header("x-request-timeout-ms"),
            ),
        )

    async def _events(self, generation: Generation, model: str) -> AsyncIterator[bytes]:
        (stream,) = generation.streams
        async with contextlib.aclosing(stream):
            try:
                async for event in stream:
                    finish = None
                    if event.finish_reason is not None:
                        finish = streams_io.finish_reason(event)
                    if event.text or finish is not None:
                        yield generate_event(model, generation.version, event.text, finish)
            except PodserveError as exc:
                # Admission is over: only the engine's own failure or the request's deadline
                # (dataplane/streams.py) lands here.
                yield generate_error_event(exc.message)
