"""`inference.GRPCInferenceService` on grpc.aio, over the transport-free data plane.

Errors: the data plane raises only `podserve.core.errors`; `status_for` maps each to a
gRPC status, once, for every method. Anything else is a bug: it is logged and the client
gets INTERNAL with a generic message (never a traceback).

Client disconnects and deadlines: grpc.aio cancels the handler task when the client
cancels or its deadline passes, and task cancellation is the data plane's one
cancellation contract (the REST edge cancels its handler the same way): a queued request
leaves its queue at once. The time the client's deadline leaves (`time_remaining()`)
goes to the data plane in `CallContext.client_timeout_s`, and the data plane computes the
request's deadline from it together with Triton's `timeout` parameter and the model's
and server's defaults, exactly as for REST; a request whose deadline passes while queued
is never computed.

Why this edge is slower than REST (issue 16; measured on the shared 2-core machine with
benchmarks/table.py, which reports the server's CPU per request apart from the client's):
- Split by thread (benchmarks/threads.py --grpc, W1 at concurrency 64, three runs), the
  server's CPU per request over gRPC against REST: event loop 0.17-0.21 ms against
  0.12-0.16; model thread 0.10-0.18 against 0.03-0.04; grpc's completion-queue poller
  and event_engine threads 0.04-0.05 more; in all 0.32-0.44 ms against 0.15-0.20.
- The model thread's share is the largest: RPCs reach the data plane spread out, the
  model thread is idle when each arrives, and the work-conserving batcher runs it alone
  (1.0-4.6 rows per model call over gRPC against 17-24 over REST), so each request pays a
  whole scikit-learn call (about 0.25 ms of CPU for one row on this machine). REST's
  requests pile up while a call runs; gRPC's come through grpc.aio's machinery more
  slowly: each unary RPC is four completion-queue batches, each handed from the poller
  thread to the loop through a socketpair byte (`PollerCompletionQueue`,
  src/python/grpcio/grpc/_cython/_cygrpc/aio/completion_queue.pyx.pxi), plus two asyncio
  tasks (`_schedule_rpc_coro`, .../aio/server.pyx.pxi). A trivial grpc.aio echo handler
  (bytes in and out) costs 110-240 us of server CPU per RPC here. perf: 46% of the
  server's samples in libpython (grpc's Cython coroutines, asyncio objects), 25% in the
  kernel switching threads, cygrpc's own code 6-9%; py-spy: about 5% of the loop's
  samples are in this servicer. Deferring the dispatch by a loop iteration (tried outside
  the tree) still gave 1.4 rows per call: the RPCs are more than one iteration apart.
- Tried without effect beyond the noise: GRPC_POLL_STRATEGY=poll or epoll1; the sync
  `grpc.server` (78-134 us per echo RPC, too little saved to pay a thread hop back into
  the loop per request). Triton's own answer, a queue delay (`max_queue_delay_ms: 1`,
  `work_conserving: false`), gathered only 4.1-5.6 rows per call over gRPC (0.32-0.40 ms
  CPU per request against 0.42-0.57) for 1.2 ms more at concurrency 1: not a default.
- What was ours is trimmed: ModelInfer runs flat (no context manager per call) and the
  codec reads each protobuf field once and skips empty maps, 33 -> 15 us per W1 decode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, NoReturn, TypeAlias

import grpc

from podserve.admission import retry_after_header
from podserve.admission.reservations import Reservation
from podserve.core.errors import (
    AlreadyExists,
    Cancelled,
    DeadlineExceeded,
    InvalidInput,
    ModelNotFound,
    NotFound,
    PayloadTooLarge,
    PodserveError,
    Unauthenticated,
    Unavailable,
    UnprocessableInput,
)
from podserve.core.ids import accept_request_id
from podserve.dataplane import CallContext, DataPlaneAPI
from podserve.dataplane.model_control import bearer_token
from podserve.protocol.v2.vllm_tensors import asks_for_generation
from podserve.server.cut import CUT_MESSAGE
from podserve.server.errors import status_of
from podserve.server.grpc import triton
from podserve.server.grpc._generated import inference_pb2 as pb
from podserve.server.grpc.codec import decode_infer_request, encode_infer_response
from podserve.server.grpc.decoupled import generation_replies, mark_final
from podserve.server.grpc.shared_memory import SharedMemoryRpcs

logger = logging.getLogger(__name__)

# grpc ships no types: grpc.aio.ServicerContext is Any to mypy.
Context: TypeAlias = Any

# The `endpoint` label the data plane records for gRPC inference.
INFER_ENDPOINT = "grpc.ModelInfer"
STREAM_INFER_ENDPOINT = "grpc.ModelStreamInfer"

# Parameters tritonclient's unload_model always sends; podserve has no ensembles, so
# there are no dependents and the value changes nothing.
_UNLOAD_PARAMETERS = frozenset({"unload_dependents"})


@dataclass(frozen=True, slots=True)
class GrpcStatus:
    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, str], ...] = ()


# Ordered: the first matching class wins, so subclasses (ModelNotReady, Draining under
# Unavailable) are covered by their base. The choices and reasons are in docs of
# `status_for`.
_STATUS_BY_ERROR: tuple[tuple[type[PodserveError], grpc.StatusCode], ...] = (
    (InvalidInput, grpc.StatusCode.INVALID_ARGUMENT),
    (UnprocessableInput, grpc.StatusCode.INVALID_ARGUMENT),
    (PayloadTooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (ModelNotFound, grpc.StatusCode.NOT_FOUND),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED),
    (Cancelled, grpc.StatusCode.CANCELLED),
)


def status_for(error: BaseException, request_id: str | None = None) -> GrpcStatus:
    """The gRPC status a client gets for `error`.

    - InvalidInput, UnprocessableInput -> INVALID_ARGUMENT: the request itself is wrong
      and retrying it unchanged cannot help (gRPC has no separate 422).
    - PayloadTooLarge -> RESOURCE_EXHAUSTED: the code gRPC itself returns when a message
      exceeds the receive limit, so clients see one code for "too big" either way.
    - ModelNotFound, NotFound (a shared-memory region) -> NOT_FOUND; AlreadyExists ->
      ALREADY_EXISTS (Triton's codes, src/grpc/grpc_utils.cc).
    - Unavailable (over capacity, ModelNotReady, Draining) -> UNAVAILABLE, the code gRPC
      clients treat as retryable (Triton also answers a full queue with UNAVAILABLE),
      with trailing metadata `retry-after` in whole seconds.
    - DeadlineExceeded -> DEADLINE_EXCEEDED; Cancelled -> CANCELLED.
    - InferenceFailed, ModelLoadFailed, any other PodserveError -> INTERNAL with its message.
    - Anything else -> INTERNAL with a generic message; the caller logs the exception.
    Every error carries `x-request-id` in trailing metadata when the request had one.
    """
    metadata: tuple[tuple[str, str], ...] = (("x-request-id", request_id),) if request_id else ()
    if not isinstance(error, PodserveError):
        return GrpcStatus(grpc.StatusCode.INTERNAL, "internal server error", metadata)
    code = grpc.StatusCode.INTERNAL
    for error_type, mapped in _STATUS_BY_ERROR:
        if isinstance(error, error_type):
            code = mapped
            break
    if isinstance(error, Unavailable):
        metadata += (("retry-after", retry_after_header(error.retry_after_s)),)
    return GrpcStatus(code, error.message, metadata)


@contextlib.asynccontextmanager
async def _status_on_error(
    context: Context, method: str, request_id: str | None = None
) -> AsyncIterator[None]:
    """End the RPC with `status_for(error)` when the body raises."""
    try:
        yield
    except grpc.aio.AbortError:
        raise  # already a status; not ours to translate
    except Exception as exc:  # every error must become a status
        await _abort(context, exc, method, request_id)


async def _abort(
    context: Context, error: Exception, method: str, request_id: str | None
) -> NoReturn:
    """End the RPC with `status_for(error)`; call it from the `except` that caught it."""
    if not isinstance(error, PodserveError):
        logger.exception("unexpected error in gRPC %s (request id %s)", method, request_id)
    status = status_for(error, request_id)
    await context.abort(status.code, status.details, status.trailing_metadata)
    # grpc.aio's abort always raises AbortError (`_ServicerContext.abort`,
    # src/python/grpcio/grpc/_cython/_cygrpc/aio/server.pyx.pxi); this is never reached.
    raise AssertionError("grpc.aio's context.abort returned")


def _call(
    context: Context,
    endpoint: str,
    request_id: str | None,
    reservation: Reservation | None = None,
) -> CallContext:
    remaining_s = context.time_remaining()  # None without a client deadline
    return CallContext(
        endpoint=endpoint,
        request_id=request_id,
        client_timeout_s=None if remaining_s is None else float(remaining_s),
        reservation=reservation,
    )


def _code(error: BaseException | None) -> str:
    """The `code` label of `podserve_requests_total`: the HTTP status the same outcome
    gets on the REST edge, so one query covers both edges."""
    if error is None:
        return "200"
    if isinstance(error, asyncio.CancelledError):
        # The drain timeout's cut (server/grpc/cut.py cancels with CUT_MESSAGE) ends the
        # call UNAVAILABLE and counts 503, as a cut REST request does; any other
        # cancellation is the client leaving.
        return "503" if error.args and error.args[0] == CUT_MESSAGE else "499"
    return str(status_of(error)) if isinstance(error, PodserveError) else "500"


def _metadata_value(context: Context, key: str) -> str | None:
    for item_key, value in context.invocation_metadata() or ():
        if item_key == key:
            return str(value)
    return None


class InferenceServicer(SharedMemoryRpcs):
    """The RPC handlers; `add_GRPCInferenceServiceServicer_to_server` registers them."""

    def __init__(self, dataplane: DataPlaneAPI) -> None:
        self._dataplane = dataplane
        # The requests of every open ModelStreamInfer stream, held for the same reason.
        self._streamed: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ health

    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: Context
    ) -> pb.ServerLiveResponse:
        async with _status_on_error(context, "ServerLive"):
            return pb.ServerLiveResponse(live=self._dataplane.live().ok)

    async def ServerReady(
        self, request: pb.ServerReadyRequest, context: Context
    ) -> pb.ServerReadyResponse:
        async with _status_on_error(context, "ServerReady"):
            return pb.ServerReadyResponse(ready=self._dataplane.ready().ok)

    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: Context
    ) -> pb.ModelReadyResponse:
        async with _status_on_error(context, "ModelReady"):
            # Triton answers OK with ready=false for a model it does not know (core
            # src/server.cc `InferenceServer::ModelIsReady`: `*ready = false`, then
            # Status::Success when GetModel fails), so clients polling readiness see
            # "not yet" rather than an error. REST keeps its 404 (DESIGN.md §2).
            try:
                ready = self._dataplane.model_ready(request.name, request.version or None)
            except ModelNotFound:
                ready = False
            return pb.ModelReadyResponse(ready=ready)

    # ------------------------------------------------------------------ metadata

    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Context
    ) -> pb.ServerMetadataResponse:
        async with _status_on_error(context, "ServerMetadata"):
            meta = self._dataplane.server_metadata()
            return pb.ServerMetadataResponse(
                name=meta.name, version=meta.version, extensions=list(meta.extensions)
            )

    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Context
    ) -> pb.ModelMetadataResponse:
        async with _status_on_error(context, "ModelMetadata"):
            meta = self._dataplane.model_metadata(request.name, request.version or None)
            tensor = pb.ModelMetadataResponse.TensorMetadata
            return pb.ModelMetadataResponse(
                name=meta.name,
                versions=list(meta.versions),
                platform=meta.platform,
                inputs=[
                    tensor(name=t.name, datatype=t.datatype.value, shape=t.shape)
                    for t in meta.inputs
                ],
                outputs=[
                    tensor(name=t.name, datatype=t.datatype.value, shape=t.shape)
                    for t in meta.outputs
                ],
            )

    # ------------------------------------------------------------------ inference

    async def ModelInfer(
        self, request: pb.ModelInferRequest, context: Context
    ) -> pb.ModelInferResponse:
        # The per-call path, kept flat (no context manager) because it runs once per
        # request; where gRPC's time goes is in the module docstring.
        request_id = accept_request_id(request.id or _metadata_value(context, "x-request-id"))
        started = time.perf_counter()
        dataplane = self._dataplane
        code = "200"
        reservation: Reservation | None = None
        try:
            # A full queue or a drain refuses before the tensors are decoded, and the
            # request let by holds a queue slot until `infer` queues it, as on REST
            # (admission/reservations.py): no refusal after a decode.
            reservation = dataplane.admit_early(request.model_name, request.model_version or None)
            infer_request = decode_infer_request(
                request, request_id=request_id, shared_memory=dataplane.shared_memory
            )
            response = await dataplane.infer(
                infer_request, _call(context, INFER_ENDPOINT, request_id, reservation)
            )
            return encode_infer_response(response, request_id=request_id)
        except Exception as exc:  # every error must become a status, counted by its code
            code = _code(exc)
            await _abort(context, exc, "ModelInfer", request_id)
        except BaseException as exc:  # cancelled: the client left or its deadline passed
            code = _code(exc)
            raise
        finally:
            if reservation is not None:  # a decode error or a cancel: give the slot back
                reservation.release()
            dataplane.record_request(
                request.model_name, INFER_ENDPOINT, code, time.perf_counter() - started
            )

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
        stream_request_id = _metadata_value(context, "x-request-id")

        async def answer(request: pb.ModelInferRequest) -> None:
            started, code = time.perf_counter(), "499"  # 499 unless it ends below
            try:
                code = _code(await answer_one(request))
            except asyncio.CancelledError as exc:
                code = _code(exc)
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
                infer_request = decode_infer_request(
                    request, request_id=request_id, shared_memory=self._dataplane.shared_memory
                )
                call = _call(context, STREAM_INFER_ENDPOINT, request_id)
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

    # ------------------------------------------------------------------ Triton extensions

    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: Context
    ) -> pb.ModelConfigResponse:
        async with _status_on_error(context, "ModelConfig"):
            _check_model_name(request.name)
            view = self._dataplane.model_config(request.name, request.version or None)
            return triton.encode_model_config(view)

    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Context
    ) -> pb.ModelStatisticsResponse:
        async with _status_on_error(context, "ModelStatistics"):
            stats = self._dataplane.model_statistics(request.name or None, request.version or None)
            return triton.encode_model_statistics(stats)

    # ------------------------------------------------------------------ repository extension

    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Context
    ) -> pb.RepositoryIndexResponse:
        async with _status_on_error(context, "RepositoryIndex"):
            _check_repository_name(request.repository_name)
            entries = self._dataplane.repository_index(ready_only=request.ready)
            index = pb.RepositoryIndexResponse.ModelIndex
            return pb.RepositoryIndexResponse(
                models=[
                    index(name=e.name, version=e.version, state=e.state, reason=e.reason)
                    for e in entries
                ]
            )

    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Context
    ) -> pb.RepositoryModelLoadResponse:
        async with _status_on_error(context, "RepositoryModelLoad"):
            _check_repository_name(request.repository_name)
            _check_model_name(request.model_name)
            _refuse_parameters(request.parameters, frozenset(), "load")
            await self._dataplane.load_model(request.model_name, _admin_call(context))
            return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Context
    ) -> pb.RepositoryModelUnloadResponse:
        async with _status_on_error(context, "RepositoryModelUnload"):
            _check_repository_name(request.repository_name)
            _check_model_name(request.model_name)
            _refuse_parameters(request.parameters, _UNLOAD_PARAMETERS, "unload")
            await self._dataplane.unload_model(request.model_name, _admin_call(context))
            return pb.RepositoryModelUnloadResponse()

    def _guard(self, context: Context, method: str) -> AbstractAsyncContextManager[None]:
        return _status_on_error(context, method)


def _admin_call(context: Context) -> CallContext:
    """A repository call with its credentials (`authorization: Bearer <token>` metadata)."""
    return CallContext(
        endpoint="grpc.repository",
        admin_token=bearer_token(_metadata_value(context, "authorization")),
    )


def _check_repository_name(name: str) -> None:
    if name:
        raise InvalidInput(
            f"repository {name!r} is unknown: podserve serves one repository; "
            f"leave repository_name empty"
        )


def _check_model_name(name: str) -> None:
    if not name:
        raise InvalidInput("model_name is required")


def _refuse_parameters(params: Mapping[str, Any], allowed: frozenset[str], action: str) -> None:
    # Triton's load parameters override the model config or upload model files; podserve
    # loads from its configured repository only, so these are refused, not ignored.
    unsupported = sorted(set(params) - allowed)
    if unsupported:
        raise InvalidInput(f"{action} parameters are not supported: {', '.join(unsupported)}")
