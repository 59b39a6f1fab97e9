"""Triton's streaming extension, `ModelStreamInfer`: the bidirectional stream of the
gRPC servicer. `StreamInferRpc` is a part of the servicer, which supplies the data plane
and the set that holds the stream's request tasks."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from podserve.core.errors import PodserveError
from podserve.core.ids import accept_request_id
from podserve.dataplane import DataPlaneAPI
from podserve.httpedge.decoding import BodyDecoding
from podserve.protocol.v2.vllm_tensors import asks_for_generation
from podserve.server.grpc._generated import inference_pb2 as pb
from podserve.server.grpc.codec import decode_infer_request, encode_infer_response
from podserve.server.grpc.context import Context, call_context, metadata_value
from podserve.server.grpc.decoupled import generation_replies, mark_final
from podserve.server.grpc.status import request_code, status_for

logger = logging.getLogger(__name__)

# The `endpoint` label the data plane records for streamed gRPC inference.
STREAM_INFER_ENDPOINT = "grpc.ModelStreamInfer"


class StreamInferRpc:
    _dataplane: DataPlaneAPI
    _decoding: BodyDecoding
    # The requests of every open ModelStreamInfer stream, held here until they unwind so
    # that the event loop (which keeps only weak references to tasks) cannot drop them.
    _streamed: set[asyncio.Task[None]]

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Triton's streaming extension. Requests run concurrently, as they arrive, and
        each is answered on the stream when it completes (clients match responses by
        `id`). A request that fails gets `error_message` and the stream goes on, as in
        Triton. A generative model asked in the vLLM backend's tensors (`text_input`)
        answers decoupled, a response per token batch (`server/grpc/decoupled.py`);
        every answer carries `triton_final_response`. When the client closes its side,
        the stream ends after the last answer; when the client leaves, its requests
        leave the data plane as a disconnected REST or unary call's do."""
        answers: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        running: set[asyncio.Task[None]] = set()
        stream_request_id = metadata_value(context, "x-request-id")

        async def answer(request: pb.ModelInferRequest) -> None:
            started, code = time.perf_counter(), "499"  # 499 unless it ends below
            try:
                code = request_code(await answer_one(request))
            except asyncio.CancelledError as exc:
                code = request_code(exc)
                raise
            finally:
                elapsed = time.perf_counter() - started
                self._dataplane.record_request(
                    request.model_name, STREAM_INFER_ENDPOINT, code, elapsed
                )

        async def answer_one(request: pb.ModelInferRequest) -> Exception | None:
            """Answer one request on the stream; return the failure it answered with."""
            request_id = accept_request_id(request.id or stream_request_id)
            failure: Exception | None = None
            try:
                infer_request = await self._decoding.run(
                    request.ByteSize(),
                    decode_infer_request,
                    request,
                    request_id=request_id,
                    shared_memory=self._dataplane.shared_memory,
                )
                call = call_context(context, STREAM_INFER_ENDPOINT, request_id)
                if asks_for_generation(infer_request) and self._dataplane.is_generative(
                    infer_request.model_name, infer_request.model_version
                ):
                    async for partial in generation_replies(self._dataplane, infer_request, call):
                        answers.put_nowait(partial)
                    return None
                response = await self._dataplane.infer(infer_request, call)
                reply = pb.ModelStreamInferResponse(
                    infer_response=encode_infer_response(response, request_id=request_id)
                )
            except Exception as exc:  # one request's failure is its own answer
                failure = exc
                if not isinstance(exc, PodserveError):
                    logger.exception("unexpected error in a ModelStreamInfer request")
                reply = pb.ModelStreamInferResponse(
                    error_message=status_for(exc).details,
                    infer_response=pb.ModelInferResponse(
                        model_name=request.model_name,
                        model_version=request.model_version,
                        id=request.id,
                    ),
                )
            answers.put_nowait(mark_final(reply, True))
            return failure

        async def read_requests() -> None:
            try:
                async for request in request_iterator:
                    task = asyncio.ensure_future(answer(request))
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
