"""gRPC inference calls that the drain timeout cuts end UNAVAILABLE (issue 15).

The REST edge answers a cut request a JSON 503 (server/cut.py). Before this, a cut gRPC
call simply ended when the gRPC server stopped: CANCELLED in the issue's runs (issue
15), UNAVAILABLE "Cancelling all calls" with grpcio 1.85 here; either way with no word
of the drain, no `retry-after`, no request id and no log line. UNAVAILABLE is the code
to end it with: gRPC's status code guide
(https://grpc.github.io/grpc/core/md_doc_statuscodes.html) calls it "most likely a
transient condition, which can be corrected by retrying with a backoff", gRPC's retry
policy (`retryableStatusCodes`, gRFC A6,
https://github.com/grpc/proposal/blob/master/A6-client-retries.md) and Envoy's
`retry_on: unavailable` retry it, CANCELLED is retried by neither, and Triton answers
UNAVAILABLE ("Server not ready") to inference it will not run because it is stopping
(core src/server.cc, `InferenceServer::InferAsync`).

So the inference RPCs register their handler task in the same `InflightRequests` as
REST; `InflightRequests.cut()` cancels the task, and the handler, seeing it was cut,
ends the call UNAVAILABLE with `CUT_MESSAGE`, a `retry-after` and the request id in
trailing metadata, and logs one line, before the runner stops the gRPC server. A
streaming call (ModelStreamInfer) ends the same way, after the answers it already sent
(`_Call` says how it is told). A call the client cancels stays CANCELLED; after a
second signal the server's stop ends what is left ("Cancelling all calls").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import NoReturn, cast

from podserve.core.errors import Draining
from podserve.dataplane import DataPlaneAPI
from podserve.httpedge.decoding import BodyDecoding
from podserve.server.cut import CUT_MESSAGE, InflightRequests, log_cut
from podserve.server.grpc._generated import inference_pb2 as pb
from podserve.server.grpc.context import Context, metadata_value
from podserve.server.grpc.decoupled import FINAL
from podserve.server.grpc.service import Asked, InferenceServicer
from podserve.server.grpc.status import status_for

_SERVICE = "/inference.GRPCInferenceService/"


class CuttableServicer(InferenceServicer):
    """`InferenceServicer` whose inference calls the drain timeout can cut, and whose
    open streams end when the server stops."""

    def __init__(
        self, dataplane: DataPlaneAPI, decoding: BodyDecoding, inflight: InflightRequests
    ) -> None:
        super().__init__(dataplane, decoding)
        self._inflight = inflight
        self._streams: set[_Call] = set()

    def close_streams(self) -> int:
        """End every open ModelStreamInfer stream once it has answered every request it
        was sent (at once for an idle one): UNAVAILABLE, "server is draining", with
        `retry-after`. Called after a clean drain, before the gRPC server stops, whose
        grace would otherwise wait for these streams (the client keeps them open): a
        tritonclient stream left open made every idle exit take the whole 1 s grace.
        Returns how many were open."""
        for call in list(self._streams):  # each leaves the set when its task ends
            call.close_when_idle()
        return len(self._streams)

    async def ModelInfer(self, message: bytes, context: Context) -> pb.ModelInferResponse:
        call = _Call.register(self._inflight)
        asked = Asked()  # empty if cut before its message was parsed
        try:
            return await self._model_infer(message, context, asked)
        except asyncio.CancelledError:
            if not call.cancelled_here:
                raise  # the client left, its deadline passed, or the server's stop
            await _end_cut(context, asked.message_id or None, asked.model_name, "ModelInfer", False)
        finally:
            self._inflight.discard(call.task)

    async def ModelStreamInfer(
        self, messages: AsyncIterator[bytes], context: Context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        call = _Call.register(self._inflight)
        self._streams.add(call)
        models: dict[str, None] = {}  # for the log line: the models asked on this stream

        async def noted() -> AsyncIterator[bytes]:
            async for message in messages:
                call.outstanding += 1  # every message gets a final answer, even garbage
                yield message

        try:
            # an async generator function, declared as the iterator grpc needs
            replies = cast(
                AsyncGenerator[pb.ModelStreamInferResponse, None],
                self._stream_infer(noted(), context, models),
            )
            async with contextlib.aclosing(replies):
                async for reply in replies:
                    call.sending = True
                    yield reply
                    call.sending = False
                    params = reply.infer_response.parameters
                    if FINAL in params and params[FINAL].bool_param:
                        call.outstanding -= 1
                    # asked while grpc was sending `reply`, or the last answer went
                    if call.cut_asked or (call.closing and call.outstanding == 0):
                        await call.end(context, ",".join(models))
        except asyncio.CancelledError:
            if not call.cancelled_here:
                raise
            await call.end(context, ",".join(models))
        finally:
            self._streams.discard(call)
            self._inflight.discard(call.task)


class _Call:
    """One inference call as the cut and the stop see it. `cancelled_here` tells a
    CancelledError of ours apart from grpc.aio's own (the client left, its deadline
    passed, or the server's stop after a second signal), which stays as it is.

    Where the call is when the cut comes decides how it is told. Waiting in the
    servicer (this module's frames below): cancel the task, and the CancelledError
    reaches the handler. At a stream's `yield`, grpc.aio is sending the last answer in
    its own frames (`_finish_handler_with_stream_responses`), where a CancelledError
    ends the RPC task with no status at all (the client then saw the server's stop,
    "Cancelling all calls"): so there, only ask, and the handler ends the call when
    grpc comes back for the next answer.

    A stream counts the requests it read and has not answered finally
    (`triton_final_response`): one with none outstanding is idle, so ending it cuts
    nothing (no log line, the drain's plain message), and `close_when_idle` never
    cancels it while an answer is still to be sent."""

    __slots__ = ("cancelled_here", "closing", "cut_asked", "outstanding", "sending", "task")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self.task = task
        self.sending = False
        self.cut_asked = False
        self.closing = False
        self.cancelled_here = False
        self.outstanding = 0

    @classmethod
    def register(cls, inflight: InflightRequests) -> _Call:
        # grpc.aio runs each RPC in its own task (grpc/_cython/_cygrpc/aio/server.pyx.pxi,
        # `_handle_rpc`), the task it cancels when the client cancels.
        task = asyncio.current_task()
        assert task is not None  # a grpc.aio handler always runs in a task
        call = cls(task)
        inflight.add(task, call.cut)
        return call

    def cut(self) -> None:
        self.cut_asked = True
        if not self.sending:
            self._cancel()

    def close_when_idle(self) -> None:
        self.closing = True
        if self.outstanding == 0 and not self.sending:
            self._cancel()

    def _cancel(self) -> None:
        self.cancelled_here = True
        # The message marks a cut for the request metrics (status.py `request_code`: 503).
        self.task.cancel(CUT_MESSAGE if self.cut_asked else None)

    async def end(self, context: Context, models: str) -> NoReturn:
        """End a stream: cut (logged) if it still owed an answer, else drained."""
        if self.cut_asked and self.outstanding > 0:
            await _end_cut(context, None, models, "ModelStreamInfer", True)
        status = status_for(Draining(), metadata_value(context, "x-request-id"))
        await context.abort(status.code, status.details, status.trailing_metadata)
        raise AssertionError("grpc.aio's abort raises")  # pragma: no cover


async def _end_cut(
    context: Context, request_id: str | None, model: str, method: str, streaming: bool
) -> NoReturn:
    request_id = request_id or metadata_value(context, "x-request-id")
    log_cut(request_id or "", model, _SERVICE + method, streaming)
    status = status_for(Draining(CUT_MESSAGE), request_id)
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("grpc.aio's abort raises")  # pragma: no cover
