"""Triton's streaming extension, `ModelStreamInfer`: the bidirectional stream of the
gRPC servicer. `StreamInferRpc` is a part of the servicer, which supplies the data plane
and the set that holds the stream's request tasks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import cast

from podserve.core.errors import PodserveError
from podserve.core.ids import accept_request_id
from podserve.dataplane import DataPlaneAPI
from podserve.httpedge.decoding import BodyDecoding
from podserve.protocol.v2.vllm_tensors import asks_for_generation
from podserve.server.grpc._generated import inference_pb2 as pb
from podserve.server.grpc.codec import decode_infer_request, encode_infer_response
from podserve.server.grpc.context import Context, call_context, metadata_value
from podserve.server.grpc.decoupled import generation_replies, mark_final
from podserve.server.grpc.handlers import parse_infer_request
from podserve.server.grpc.status import request_code, status_for

logger = logging.getLogger(__name__)

# The `endpoint` label the data plane records for streamed gRPC inference.
STREAM_INFER_ENDPOINT = "grpc.ModelStreamInfer"
# Models a stream notes for the drain's log line, at most (`_stream_infer`'s `models`).
MAX_NOTED_MODELS = 16


class StreamInferRpc:
    _dataplane: DataPlaneAPI
    _decoding: BodyDecoding
    # The requests of every open ModelStreamInfer stream, held here until they unwind so
    # that the event loop (which keeps only weak references to tasks) cannot drop them.
    _streamed: set[asyncio.Task[None]]

    async def _stream_infer(
        self,
        messages: AsyncIterator[bytes],
        context: Context,
        models: dict[str, None] | None = None,
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Triton's streaming extension. Requests run concurrently, as they arrive, and
        each is answered on the stream when it completes (clients match responses by
        `id`). A request that fails gets `error_message` and the stream goes on, as in
        Triton; so does a message that is not a valid ModelInferRequest (grpc.aio hands
        over each message's bytes, `server/grpc/handlers.py`). A generative model asked
        in the vLLM backend's tensors (`text_input`) answers decoupled, a response per
        token batch (`server/grpc/decoupled.py`); every answer carries
        `triton_final_response`. When the client closes its side, the stream ends after
        the last answer; when the client leaves, its requests leave the data plane as a
        disconnected REST or unary call's do. `models`, when given, collects the models
        the stream's requests ask for, in the order first asked: only models the server
        knows (admitted), and at most `MAX_NOTED_MODELS`, so that a stream naming
        20,000 made-up models neither grows it nor scans it for each."""
        answers: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        running: set[asyncio.Task[None]] = set()
        stream_request_id = metadata_value(context, "x-request-id")

        async def answer(message: bytes) -> None:
            """Answer one message on the stream, and count it."""
            started, code = time.perf_counter(), "499"  # 499 unless it ends below
            request = _UNPARSED
            try:
                # A big message is parsed on the decoding thread (server/grpc/service.py).
                request = await self._decoding.run(len(message), parse_infer_request, message)
                await respond(request, len(message))
                code = "200"
            except asyncio.CancelledError as exc:
                code = request_code(exc)
                raise
            except Exception as exc:  # one request's failure is its own answer
                code = request_code(exc)
                if not isinstance(exc, PodserveError):
                    logger.exception("unexpected error in a ModelStreamInfer request")
                answers.put_nowait(_failed(exc, request))
            finally:
                elapsed = time.perf_counter() - started
                self._dataplane.record_request(
                    request.model_name, STREAM_INFER_ENDPOINT, code, elapsed
                )

        async def respond(request: pb.ModelInferRequest, size_bytes: int) -> None:
            """Answer a parsed request on the stream; raise what it fails with."""
            dataplane = self._dataplane
            request_id = accept_request_id(request.id or stream_request_id)
            # As the unary call (server/grpc/service.py): a full queue, a drain or an
            # unknown model refuses before the tensors are decoded, and a request let by
            # holds a queue slot while they are. Before, a full queue refused a stream's
            # request only after its decode.
            reservation = dataplane.admit_early(request.model_name, request.model_version or None)
            try:
                if models is not None and len(models) < MAX_NOTED_MODELS:
                    models[request.model_name] = None  # admitted: a model the server knows
                infer_request = await self._decoding.run(
                    size_bytes,
                    decode_infer_request,
                    request,
                    request_id=request_id,
                    shared_memory=dataplane.shared_memory,
                )
                call = call_context(context, STREAM_INFER_ENDPOINT, request_id, reservation)
                if asks_for_generation(infer_request) and dataplane.is_generative(
                    infer_request.model_name, infer_request.model_version
                ):
                    replies = generation_replies(dataplane, infer_request, call, request.id)
                    async for partial in replies:
                        answers.put_nowait(partial)
                    return
                response = await dataplane.infer(infer_request, call)
            finally:
                if reservation is not None:  # a decode error or a cancel: give the slot back
                    reservation.release()
            encoded = encode_infer_response(response, request_id=request_id, message_id=request.id)
            reply = pb.ModelStreamInferResponse(infer_response=encoded)
            answers.put_nowait(mark_final(reply, True))

        async def read_requests() -> None:
            try:
                async for message in messages:
                    task = asyncio.ensure_future(answer(message))
                    running.add(task)
                    self._streamed.add(task)
                    task.add_done_callback(running.discard)
                    task.add_done_callback(self._streamed.discard)
                while running:  # the client closed its side: finish what it sent
                    await asyncio.wait(set(running))
            finally:
                answers.put_nowait(None)

        reader = asyncio.ensure_future(read_requests())
        why: str | None = None  # the cut's message reaches the requests it cuts
        try:
            while (item := await answers.get()) is not None:
                yield item
            await reader  # surfaces a broken request stream as the RPC's error
        except asyncio.CancelledError as exc:
            why = str(exc.args[0]) if exc.args else None
            raise
        finally:
            # The client left (or the stream ended): its queued requests leave the data
            # plane, by the one cancellation contract.
            reader.cancel()
            for task in running:
                task.cancel(why)

    async def ModelStreamInfer(
        self, messages: AsyncIterator[bytes], context: Context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        # an async generator function, as grpc.aio needs (it iterates a plain function's
        # generator on a thread); `CuttableServicer` calls `_stream_infer` itself
        replies = cast(
            AsyncGenerator[pb.ModelStreamInferResponse, None], self._stream_infer(messages, context)
        )
        async with contextlib.aclosing(replies):
            async for reply in replies:
                yield reply


# What a message that cannot be parsed asked for: nothing known (no model, no id).
_UNPARSED = pb.ModelInferRequest()


def _failed(error: Exception, request: pb.ModelInferRequest) -> pb.ModelStreamInferResponse:
    """The final answer to a request that failed with `error`, in band: Triton's
    `error_message`, with the request's model and id so that the client can match it."""
    reply = pb.ModelStreamInferResponse(
        error_message=status_for(error).details,
        infer_response=pb.ModelInferResponse(
            model_name=request.model_name, model_version=request.model_version, id=request.id
        ),
    )
    return mark_final(reply, True)
