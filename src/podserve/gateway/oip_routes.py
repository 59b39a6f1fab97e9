"""The OIP v2 routes that carry no inference: Triton's health probes and server metadata,
answered by the gateway itself, and model metadata and readiness (versioned or not),
passed through from a pod serving the model, unbilled. Inference
(`/v2/models/{m}[/versions/{v}]/infer`) is proxied and counted in app.py.

Who may ask: the health probes and the server metadata need no key, like the gateway's
own `/healthz` and `/ready` and like Triton's (a Kubernetes probe, tritonclient's
`is_server_live`/`is_server_ready`, send none; nothing in them concerns a tenant or a
model). Model metadata and readiness name a model: a key that may use it, as for
inference.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import orjson

import podserve
from podserve.gateway.asgi import Call, Reply, Routes
from podserve.gateway.errors import GatewayError, ModelForbidden, UnknownModel, shown
from podserve.gateway.forward import UPSTREAM_ERRORS, upstream_failed
from podserve.gateway.upstream_http import ResponseTooLarge
from podserve.gateway.wire import NOT_IN_POOLS, OVERHEAD, REQUEST_ID, UPSTREAM, request_id

if TYPE_CHECKING:
    from podserve.gateway.app import Gateway

# Only what holds through the gateway: the binary tensor extension's headers go with the
# body both ways (wire.V2_BODY_HEADERS). The pods' other extensions (model repository,
# configuration, statistics, shared memory, generate) have no route here, and a shared
# memory region registered on one pod means nothing to the next request's pod.
EXTENSIONS = ("binary_tensor_data",)
_SERVER = orjson.dumps(
    {"name": "podserve-gateway", "version": podserve.__version__, "extensions": EXTENSIONS}
)
_OK = b'{"status":"ok"}'
_NOT_READY = orjson.dumps({"status": "fail", "reasons": ["no pool endpoint is ready"]})
# Not proxied: the overhead header says 0, and its histogram is left alone (as /ready's).
_OWN = (OVERHEAD, b"0.000")


class OipRoutes:
    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    def register(self, routes: Routes) -> None:
        routes.add("GET", "/v2", self._server_metadata)
        routes.add("GET", "/v2/health/live", self._live)
        routes.add("GET", "/v2/health/ready", self._ready)
        for shape in ("", "ready", "versions/", "versions/ready"):
            routes.add_v2("GET", shape, self._model_metadata)

    async def _server_metadata(self, _call: Call) -> Reply:
        return Reply(200, _SERVER, headers=[_OWN])

    async def _live(self, _call: Call) -> Reply:
        """The gateway process answers: that is all liveness says (as `/healthz`)."""
        return Reply(200, _OK, headers=[_OWN])

    async def _ready(self, _call: Call) -> Reply:
        """Whether an OIP request could be served now: OIP goes to pools only, so some
        pool pod must be ready, by the router's own view (its scrapes and breakers). The
        gateway's `/ready` stays 200 regardless: it is the replica's Kubernetes readiness,
        and with the pools down the replica still serves fallbacks and answers the rest
        with 503 and Retry-After, which no other replica would do better."""
        if self._gateway.router.serving(time.monotonic()):
            return Reply(200, _OK, headers=[_OWN])
        return Reply(503, _NOT_READY, headers=[_OWN, (b"retry-after", b"1")])

    async def _model_metadata(self, call: Call) -> Reply:
        """Model metadata and readiness, passed through from a pod serving the model:
        authenticated, not billed."""
        gateway = self._gateway
        started = time.perf_counter()
        model = call.params["model"]
        rid = request_id(call.header(b"x-request-id"))
        try:
            key = await gateway.accounting.authenticate(call.header(b"authorization"))
            if not key.allows(model):
                raise ModelForbidden(f"this key may not use model '{shown(model)}'")
            if not gateway.router.knows(model, hosted=False):
                raise UnknownModel(f"model '{shown(model)}' {NOT_IN_POOLS}")
            attempt = await gateway.forwarder.send(model, call.path, b"", rid, method="GET")
        except GatewayError as exc:
            return gateway.refuse(exc, started, oip=True)
        response = attempt.response
        try:
            content = await response.read(gateway.config.max_response_bytes)
        except (*UPSTREAM_ERRORS, ResponseTooLarge) as exc:
            gateway.forwarder.finished(attempt, False)
            return gateway.refuse(upstream_failed(exc), started, oip=True)
        finally:
            response.release()
        gateway.forwarder.finished(attempt, response.status < 500)
        reply = gateway.json_reply(
            content,
            response.status,
            started,
            attempt.upstream_s,
            response.headers.get("content-type", "application/json"),
        )
        reply.headers += ((UPSTREAM, attempt.target.upstream.encode()), (REQUEST_ID, rid.encode()))
        return reply
