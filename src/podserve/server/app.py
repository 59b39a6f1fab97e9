"""The ASGI application: routing, error mapping, request ids, access logs, request
metrics, and client-disconnect cancellation for inference."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from podserve.core.errors import NotFound, PodserveError
from podserve.core.ids import accept_request_id
from podserve.dataplane import DataPlane
from podserve.httpedge.decoding import BodyDecoding
from podserve.server.cut import InflightRequests, cut_event, cut_response, log_cut
from podserve.server.errors import error_response, openai_error_body, openai_error_response
from podserve.server.http import (
    ClientGone,
    Message,
    Receive,
    Request,
    Response,
    Scope,
    Send,
    StreamingResponse,
    json_response,
    send_response,
    send_streaming,
)
from podserve.server.routes_generate import GenerateRoutes
from podserve.server.routes_health import HealthRoutes
from podserve.server.routes_openai import OpenAIRoutes
from podserve.server.routes_openai_models import MODEL_PATH_PREFIX, OpenAIModelRoutes
from podserve.server.routes_shm import REGION, SharedMemoryRoutes
from podserve.server.routes_v2 import V2Routes

log = logging.getLogger("podserve.access")
errlog = logging.getLogger("podserve.server")

INTERNAL_ERROR = "internal server error; see the server log"

Handler = Callable[[Request], Awaitable[Response | StreamingResponse]]


@dataclass(frozen=True, slots=True)
class Route:
    handler: Handler
    # Inference-like routes are counted in request metrics and watched for disconnects.
    inference: bool = False
    endpoint: str = "v2"
    # OpenAI routes answer errors with OpenAI's error object.
    openai: bool = False
    # Tensor inference names its model in the URL: a full queue refuses it unread.
    early_refusal: bool = False


class App:
    def __init__(self, dataplane: DataPlane) -> None:
        self._dataplane = dataplane
        edge = dataplane.edge
        self._sample_rate = edge.access_log_sample_rate
        self._max_body_bytes = edge.max_body_bytes
        # inference handlers running now: the runner cuts them when the drain times out
        self.inflight = InflightRequests()
        # big request bodies, decoded one at a time off the event loop
        self.decoding = BodyDecoding("podserve-body-decode")
        health = HealthRoutes(dataplane)
        self._v2 = V2Routes(dataplane, self.decoding)
        self._generate = GenerateRoutes(dataplane, self.decoding)
        probe = {
            "/startup": health.startup,
            "/healthz": health.live,
            "/livez": health.live,
            "/v2/health/live": health.live,
            "/v1/health/live": health.live,
            "/ready": health.ready,
            "/readyz": health.ready,
            "/v2/health/ready": health.ready,
            "/v1/health/ready": health.ready,
            "/metrics": health.metrics,
            "/v2": self._v2.server_metadata,
        }
        self._static: dict[str, dict[str, Route]] = {
            path: {"GET": Route(handler)} for path, handler in probe.items()
        }
        self._static["/v2/repository/index"] = {"POST": Route(self._v2.repository_index)}
        # Triton's statistics of every loaded model (a model named "stats" has its own
        # at /v2/models/stats/stats)
        self._static["/v2/models/stats"] = {"GET": Route(self._v2.model_statistics)}
        # Triton's shared-memory extensions: the table, and each region by name
        shm = SharedMemoryRoutes(dataplane)
        self._shm_regions: dict[str, dict[str, dict[str, Route]]] = {
            "/v2/systemsharedmemory/": {
                "status": {"GET": Route(shm.system_status)},
                "register": {"POST": Route(shm.system_register)},
                "unregister": {"POST": Route(shm.system_unregister)},
            },
            "/v2/cudasharedmemory/": {
                "status": {"GET": Route(shm.cuda_status)},
                "register": {"POST": Route(shm.cuda_register)},
                "unregister": {"POST": Route(shm.cuda_unregister)},
            },
        }
        for prefix, actions in self._shm_regions.items():
            self._static[prefix + "status"] = actions["status"]
            self._static[prefix + "unregister"] = actions["unregister"]
        openai = OpenAIRoutes(dataplane, self.decoding)
        # the list and each model, with one `created` time
        self._openai_models = OpenAIModelRoutes(dataplane)
        self._static["/v1/models"] = {"GET": Route(self._openai_models.models, openai=True)}
        self._static["/v1/completions"] = {
            "POST": Route(
                openai.completions, inference=True, endpoint="openai.completions", openai=True
            )
        }
        self._static["/v1/chat/completions"] = {
            "POST": Route(
                openai.chat_completions, inference=True, endpoint="openai.chat", openai=True
            )
        }
        self._static["/v1/embeddings"] = {
            "POST": Route(
                openai.embeddings, inference=True, endpoint="openai.embeddings", openai=True
            )
        }

    def close(self) -> None:
        """Stop the body-decoding thread (a decode in progress finishes on its own)."""
        self.decoding.close()

    # --- routing -----------------------------------------------------------------------
    def _route(self, method: str, path: str) -> tuple[Route, dict[str, str], str] | Response:
        table = self._static.get(path)
        params: dict[str, str] = {}
        model = ""
        if table is None:
            table, params, model = self._dynamic(path)
        openai = path.startswith("/v1/")
        if table is None:
            message = f"no route for {method} {path}"
            if openai:  # a path, not a model: "not_found", not "model_not_found"
                return openai_error_response(NotFound(message))
            return json_response(404, {"error": message})
        route = table.get(method)
        if route is None:
            allowed = ", ".join(sorted(table))
            message = f"method {method} not allowed on {path}; use {allowed}"
            body: dict[str, object] = {"error": message}
            if openai:
                body = openai_error_body(message, "invalid_request_error", "method_not_allowed")
            return json_response(405, body, [(b"allow", allowed.encode())])
        return route, params, model

    def _dynamic(self, path: str) -> tuple[dict[str, Route] | None, dict[str, str], str]:
        if path.startswith("/v2/models/"):
            parts = path[len("/v2/models/") :].split("/")
            model, rest = parts[0], parts[1:]
            params: dict[str, str] = {}
            if len(rest) >= 2 and rest[0] == "versions":
                params["version"] = rest[1]
                rest = rest[2:]
            if not model:
                return None, {}, ""
            if not rest:
                return {"GET": Route(self._v2.model_metadata)}, params, model
            if rest == ["ready"]:
                return {"GET": Route(self._v2.model_ready)}, params, model
            if rest == ["generate"]:
                route = Route(self._generate.generate, inference=True, endpoint="v2.generate")
                return {"POST": route}, params, model
            if rest == ["generate_stream"]:
                route = Route(
                    self._generate.generate_stream, inference=True, endpoint="v2.generate_stream"
                )
                return {"POST": route}, params, model
            if rest == ["config"]:
                return {"GET": Route(self._v2.model_config)}, params, model
            if rest == ["stats"]:
                return {"GET": Route(self._v2.model_statistics)}, params, model
            if rest == ["infer"]:
                route = Route(self._v2.infer, inference=True, early_refusal=True)
                return {"POST": route}, params, model
        elif path.startswith("/v2/repository/models/"):
            parts = path[len("/v2/repository/models/") :].split("/")
            if len(parts) == 2 and parts[0]:
                if parts[1] == "load":
                    return {"POST": Route(self._v2.load)}, {}, parts[0]
                if parts[1] == "unload":
                    return {"POST": Route(self._v2.unload)}, {}, parts[0]
        elif path.startswith(MODEL_PATH_PREFIX):
            # The id is the rest of the path, "/" included (routes_openai_models.py).
            model_id = path[len(MODEL_PATH_PREFIX) :]
            if model_id:
                return {"GET": Route(self._openai_models.model, openai=True)}, {}, model_id
        elif path.startswith(("/v2/systemsharedmemory/region/", "/v2/cudasharedmemory/region/")):
            # The name is everything up to the action: it may hold a "/" of its own.
            prefix, _, tail = path.partition("region/")
            name, _, action = tail.rpartition("/")
            table = self._shm_regions[prefix].get(action)
            if name and table is not None:
                return table, {REGION: name}, ""
        return None, {}, ""

    # --- ASGI ----------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        started = time.perf_counter()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        request_id = accept_request_id(headers.get("x-request-id"))
        method, path = scope["method"], scope["path"]
        routed = self._route(method, path)
        if isinstance(routed, Response):
            await send_response(send, routed, request_id)
            return
        route, params, model = routed
        request = Request(scope, receive, method, path, headers, request_id, params, model)
        if route.inference:
            status = await self._run_inference(route, request, send)
            self._account(request, route, 499 if status is None else status, started)
            return
        response = await self._run(route, request)
        if isinstance(response, StreamingResponse):  # only inference routes stream
            raise TypeError(f"{path} returned a stream outside an inference route")
        await send_response(send, response, request_id)

    def _error(self, route: Route, exc: PodserveError) -> Response:
        return openai_error_response(exc) if route.openai else error_response(exc)

    async def _run(self, route: Route, request: Request) -> Response | StreamingResponse:
        try:
            return await route.handler(request)
        except PodserveError as exc:
            return openai_error_response(exc) if route.openai else error_response(exc)
        except ClientGone:
            return json_response(499, {"error": "client disconnected"})
        except Exception:
            errlog.exception("unhandled error", extra={"request_id": request.request_id})
            if route.openai:  # the openai SDK reads only its own error object
                body = openai_error_body(INTERNAL_ERROR, "server_error", "internal_error")
                return json_response(500, body)
            return json_response(500, {"error": INTERNAL_ERROR})

    async def _run_inference(self, route: Route, request: Request, send: Send) -> int | None:
        try:
            return await self._run_admitted(route, request, send)
        finally:
            # The queue slot admission promised, on whatever path did not hand it to the
            # queue (DataPlane.infer does, as the request enters): a leak would refuse
            # that model's requests for good.
            request.release_reservation()

    async def _run_admitted(self, route: Route, request: Request, send: Send) -> int | None:
        """Run the handler and send its answer, cancelling it if the client disconnects
        first: a queued request then leaves the queue and frees its slot, and a stream is
        aborted, freeing its sequence and KV cache. Returns the status; None = client gone."""
        version = request.path_params.get("version")
        try:
            if route.early_refusal:
                # Before a byte of the body is read: a full queue, a draining server or an
                # unknown model costs no read and no decode (DataPlane.refuse_early).
                self._dataplane.refuse_early(request.model, version)
            await request.body(self._max_body_bytes)  # cached for the handler
            if route.early_refusal:
                # The body is in: a queue slot is promised while it is decoded, so requests
                # arriving meanwhile see it taken (DataPlane.admit_early). Not before: a
                # client trickling its body held a slot until body_timeout_s, and 256 such
                # connections refused every request to the model while its queue was empty.
                request.reservation = self._dataplane.admit_early(request.model, version)
        except PodserveError as exc:
            response = self._error(route, exc)
            await send_response(send, response, request.request_id)
            return response.status
        except ClientGone:
            return None
        except asyncio.CancelledError:
            # uvicorn's shutdown cancels requests still sending their bodies: nothing of
            # theirs was admitted, so they end here, quietly, instead of one "Exception in
            # ASGI application" traceback each (200 of them with 200 slow clients).
            return None
        task = asyncio.current_task()
        gone = answering = started = False

        async def tracked(message: Message) -> None:
            # whether a status line went out decides how a cut request ends
            nonlocal started
            started = True
            await send(message)

        async def watch_disconnect() -> None:
            nonlocal gone
            # Once the body is read, receive() returns only when the client disconnects
            # or the response has been sent.
            message = await request.receive()
            if message["type"] == "http.disconnect" and not answering and task is not None:
                gone = True
                task.cancel()

        watcher = asyncio.ensure_future(watch_disconnect())
        if task is not None:
            self.inflight.add(task)
        try:
            result = await self._run(route, request)
            if isinstance(result, StreamingResponse):
                # The watcher stays armed while the stream is sent: a client that leaves
                # mid-stream cancels it, which aborts the generation.
                await send_streaming(tracked, result, request.request_id)
                return result.status
            answering = True
            if result.status == 499:
                return None
            await send_response(tracked, result, request.request_id)
            return result.status
        except asyncio.CancelledError:
            if gone:
                return None
            if self.inflight.cutting:
                return await self._answer_cut(route, request, send, started)
            raise
        finally:
            answering = True
            watcher.cancel()
            if task is not None:
                self.inflight.discard(task)

    async def _answer_cut(self, route: Route, request: Request, send: Send, started: bool) -> int:
        """End a request the drain timeout cut: a JSON 503, or a last event on a stream
        whose status line already went (server/cut.py)."""
        log_cut(request.request_id, request.model, request.path, started)
        if started:
            body = cut_event(route.openai)
            await send({"type": "http.response.body", "body": body, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return 200
        response = cut_response(route.openai)
        await send_response(send, response, request.request_id)
        return response.status

    def _account(self, request: Request, route: Route, status: int, started: float) -> None:
        elapsed = time.perf_counter() - started
        self._dataplane.record_request(request.model, route.endpoint, str(status), elapsed)
        if self._sample_rate and (self._sample_rate >= 1 or random.random() < self._sample_rate):
            log.info(
                "request",
                extra={
                    "request_id": request.request_id,
                    "model": request.model,
                    "method": request.method,
                    "path": request.path,
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 3),
                },
            )


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


__all__ = ["App"]
