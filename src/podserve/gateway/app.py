"""The gateway's request handling: decode, call accounting and the forwarder, encode (the
bare ASGI edge is `asgi`).

Routes: the OpenAI-compatible `/v1/models`, `/v1/completions`, `/v1/chat/completions`
(SSE), `/v1/embeddings`; OIP v2 `/v2/models/{m}[/versions/{v}]/infer` (its other routes:
oip_routes); the gateway's own `/healthz`, `/ready`, `/metrics`. Every response carries
`x-podserve-gateway-overhead-ms`: the time until its headers minus the upstream's share.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from functools import partial
from typing import Any

import orjson

from podserve.config.egress_proxy import NO_PROXIES, ProxySettings
from podserve.config.gateway_config import GatewayConfig
from podserve.gateway.accounting import Accounting, Admission
from podserve.gateway.asgi import App, Call, ClientGone, Reply, Routes
from podserve.gateway.body_parse import BodyParser
from podserve.gateway.budget import Usage
from podserve.gateway.client_watch import ClientWatch
from podserve.gateway.errors import (
    GatewayError,
    InvalidRequest,
    Overloaded,
    UnknownModel,
    shown,
)
from podserve.gateway.exchange import (
    Exchange,
    settle,
    settle_failed,
    stream,
    unary_reply,
    unless_gone,
)
from podserve.gateway.forward import Forwarder
from podserve.gateway.housekeeping import housekeep
from podserve.gateway.inflight import InFlight, Ticket
from podserve.gateway.metrics import CONTENT_TYPE, GatewayMetrics
from podserve.gateway.oip_routes import OipRoutes
from podserve.gateway.retry_budget import RetryBudget
from podserve.gateway.routing import Router
from podserve.gateway.scrape import Scraper
from podserve.gateway.store.base import Outcome, Store
from podserve.gateway.upstream_http import Header
from podserve.gateway.wire import (
    NOT_IN_POOLS,
    OVERHEAD,
    OVERHEAD_HEADER,
    V2_BODY_HEADERS,
    BadRequest,
    Billable,
    Endpoint,
    error_body,
    forwarded_body,
    oip_error_body,
    request_id,
)

__all__ = ["OVERHEAD_HEADER", "Gateway"]

log = logging.getLogger("podserve.gateway")


class Gateway:
    """Everything one gateway replica holds; `asgi()` is its HTTP app."""

    def __init__(
        self,
        config: GatewayConfig,
        store: Store,
        hosted_keys: Mapping[str, str],
        proxies: ProxySettings = NO_PROXIES,
    ) -> None:
        self.config = config
        self.metrics = GatewayMetrics()
        self.router = Router(config)
        self.retry_budget = RetryBudget(config.routing.retry_budget_ratio)
        self.accounting = Accounting(config, store)
        self.inflight = InFlight(config.max_in_flight, config.max_body_bytes_in_flight)
        self.parser = BodyParser()
        r = config.routing
        self.forwarder = Forwarder(
            self.router,
            self.retry_budget,
            self.metrics,
            hosted_keys,
            r.connect_timeout_s,
            r.read_timeout_s,
            proxies,
        )
        self.scraper = Scraper(self.router, r.scrape_interval_ms / 1000, proxies=proxies)
        self._housekeeping: asyncio.Task[None] | None = None

    # --- lifecycle -------------------------------------------------------------------
    async def startup(self) -> None:
        setup = getattr(self.accounting.store, "setup", None)
        if setup is not None:
            await setup()
        await self.scraper.start()
        self._housekeeping = asyncio.create_task(
            housekeep(self.accounting, self.config.defaults.lease_s)
        )

    async def shutdown(self) -> None:
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._housekeeping
        await self.scraper.stop()
        await self.forwarder.close()
        with contextlib.suppress(TimeoutError):  # late store calls end on socket timeouts
            async with asyncio.timeout(5):
                await self.accounting.quiesce()
        self.accounting.counting.close()
        self.parser.close()
        await self.accounting.store.close()

    def asgi(self) -> App:
        routes = Routes()
        routes.add("GET", "/healthz", self._ok)
        routes.add("GET", "/ready", self._ok)
        routes.add("GET", "/metrics", self._metrics)
        routes.add("GET", "/v1/models", self._models)
        routes.add_prefix("GET", "/v1/models/", self._model)
        routes.add("POST", "/v1/completions", self._completions)
        routes.add("POST", "/v1/chat/completions", self._chat)
        routes.add("POST", "/v1/embeddings", self._embeddings)
        routes.add_v2("POST", "infer", self._v2_infer)
        routes.add_v2("POST", "versions/infer", self._v2_infer)
        OipRoutes(self).register(routes)  # health, server and model metadata
        return App(routes, self.startup, self.shutdown, OVERHEAD)

    # --- small routes ----------------------------------------------------------------
    # Own routes carry the overhead header too, kept out of its histogram (not proxied).
    async def _ok(self, _call: Call) -> Reply:
        return Reply(200, b'{"status":"ok"}', headers=[(OVERHEAD, b"0.000")])

    async def _metrics(self, _call: Call) -> Reply:
        started = time.perf_counter()
        body = self.metrics.exposition()
        took = f"{(time.perf_counter() - started) * 1000:.3f}".encode()
        return Reply(200, body, CONTENT_TYPE.encode(), [(OVERHEAD, took)])

    async def _models(self, call: Call) -> Reply:
        started = time.perf_counter()
        try:
            key = await self.accounting.authenticate(call.header(b"authorization"))
        except GatewayError as exc:
            return self.refuse(exc, started)
        models = [m for m in self.config.models() if key.allows(m)]
        body = {"object": "list", "data": [_model_object(m) for m in models]}
        return self.json_reply(orjson.dumps(body), 200, started, 0.0)

    async def _model(self, call: Call) -> Reply:
        """One model, as the list gives it (the openai SDK's `models.retrieve`); a model
        the key may not use is as unknown as one the gateway does not serve."""
        started = time.perf_counter()
        name = call.params["name"]
        try:
            key = await self.accounting.authenticate(call.header(b"authorization"))
            if name not in self.config.models() or not key.allows(name):
                raise UnknownModel(f"the model '{shown(name)}' does not exist")
        except GatewayError as exc:
            return self.refuse(exc, started)
        return self.json_reply(orjson.dumps(_model_object(name)), 200, started, 0.0)

    # --- the proxied routes ----------------------------------------------------------
    async def _completions(self, call: Call) -> Reply | None:
        return await self._proxy(call, Endpoint.COMPLETIONS)

    async def _chat(self, call: Call) -> Reply | None:
        return await self._proxy(call, Endpoint.CHAT)

    async def _embeddings(self, call: Call) -> Reply | None:
        return await self._proxy(call, Endpoint.EMBEDDINGS)

    async def _v2_infer(self, call: Call) -> Reply | None:
        return await self._proxy(call, Endpoint.V2)

    async def _proxy(self, call: Call, endpoint: Endpoint) -> Reply | None:
        started = time.perf_counter()
        declared = call.header(b"content-length")
        length = int(declared) if declared is not None and declared.isdigit() else 0
        try:
            # Past maxBodyBytes the body is refused with 413 before it is read: hold less.
            ticket = self.inflight.enter(min(length, self.config.max_body_bytes))
        except Overloaded as exc:
            return self.refuse(exc, started, endpoint is Endpoint.V2)
        try:
            reply = await self._proxy_admitted(call, endpoint, started, ticket)
        except BaseException:
            self.inflight.leave(ticket)
            raise
        if reply is None:  # a stream, already sent
            self.inflight.leave(ticket)
        else:  # in flight until sent: a slow reader's response is still held here
            reply.done = lambda: self.inflight.leave(ticket)
        return reply

    async def _body(self, call: Call, ticket: Ticket) -> bytes:
        """The request body, counted among the bytes in flight as it arrives."""
        try:
            return await call.body(
                self.config.max_body_bytes, lambda size: self.inflight.grow(ticket, size)
            )
        except GatewayError as exc:
            # The rest of the body is unread: the connection cannot carry another request.
            exc.close_connection = True
            raise

    async def _proxy_admitted(
        self, call: Call, endpoint: Endpoint, started: float, ticket: Ticket
    ) -> Reply | None:
        rid = request_id(call.header(b"x-request-id"))
        watch = ClientWatch(call.receive)  # started only if something waits (client_watch)
        deadline = self.accounting.deadline()  # the store's, over lookup and reservation
        try:
            key = await self.accounting.authenticate(call.header(b"authorization"), deadline)
            reading = time.monotonic()
            raw = await self._body(call, ticket)
            deadline += time.monotonic() - reading  # the client's upload is not store time
            parsed: dict[str, Any] = {}
            if endpoint is Endpoint.V2:
                # OIP bodies are forwarded byte for byte: nothing in them is billed.
                model = call.params["model"]
                bill = Billable(model, endpoint, False, False, None, "", 1, (), 0)
            else:
                parsed, bill = await self.parser.parse(raw, endpoint)
            if not self.router.knows(bill.model, hosted=endpoint is not Endpoint.V2):
                where = NOT_IN_POOLS if endpoint is Endpoint.V2 else "is not served by this gateway"
                raise UnknownModel(f"model '{shown(bill.model)}' {where}")
            admission = await self.accounting.admit(key, bill, rid, deadline, watch)
        except BadRequest as exc:
            watch.stop()
            return self.refuse(InvalidRequest(str(exc)), started, endpoint is Endpoint.V2)
        except GatewayError as exc:
            watch.stop()  # it waited for budget in vain
            return self.refuse(exc, started, endpoint is Endpoint.V2)
        except BaseException:
            watch.stop()
            raise
        ex = Exchange(admission, bill, watch)
        holder = [parsed]  # `_forward` drops the parsed body as soon as it is re-encoded
        del parsed
        try:
            return await self._forward(call, endpoint, started, rid, ex, raw, holder)
        except BaseException as exc:
            if not ex.settled:
                await settle_failed(self, ex, exc)
            raise
        finally:
            watch.stop()

    async def _forward(
        self,
        call: Call,
        endpoint: Endpoint,
        started: float,
        rid: str,
        ex: Exchange,
        raw: bytes,
        holder: list[dict[str, Any]],
    ) -> Reply | None:
        admission, bill = ex.admission, ex.bill
        parsed = holder.pop()
        renamed = None
        passed: list[Header] = []
        if endpoint is Endpoint.V2:
            body = raw
            passed = call.headers_named(V2_BODY_HEADERS)
        else:
            force_usage = bill.stream and endpoint is not Endpoint.EMBEDDINGS
            body = await self.parser.run(
                len(raw), forwarded_body, parsed, bill, admission.max_tokens, force_usage
            )
            if self.router.renamed(bill.model):
                renamed = partial(forwarded_body, parsed, bill, admission.max_tokens, force_usage)
            del parsed  # a big body's objects go now, not when its response has been relayed
        if ex.watch.left:  # it left while waiting for budget: nothing sent, nothing charged
            raise ClientGone
        ex.sent = True
        try:
            attempt = await unless_gone(
                ex.watch,
                self.forwarder.send(
                    bill.model, call.path, body, rid, renamed=renamed, passed=passed
                ),
            )
        except GatewayError as exc:
            await settle(self, ex, Usage(0, 0), Outcome.ERROR, "", exc.status)
            return self.refuse(exc, started, endpoint is Endpoint.V2)
        ex.upstream = attempt.target.upstream
        response = attempt.response
        is_sse = response.headers.get("content-type", "").startswith("text/event-stream")
        if response.status == 200 and is_sse:
            await stream(self, call, ex, attempt, started, rid)
            return None
        return await unary_reply(self, ex, attempt, endpoint, started, rid)

    # --- helpers ---------------------------------------------------------------------
    async def settle_admitted(
        self, admission: Admission, usage: Usage, outcome: Outcome, upstream: str, code: int
    ) -> None:
        """Settle and count the request (`exchange` settles each admission once)."""
        cost = await self.accounting.settle(admission, usage, outcome, upstream)
        key = admission.key
        labels = (key.namespace, key.team, admission.model)
        m = self.metrics
        m.request(*labels, upstream or "none", code).inc()
        if usage.prompt_tokens:
            m.token(*labels, upstream, "prompt").inc(usage.prompt_tokens)
        if usage.completion_tokens:
            m.token(*labels, upstream, "completion").inc(usage.completion_tokens)
        if cost:
            m.spent(*labels).inc(cost / 1_000_000)

    def json_reply(
        self,
        content: bytes,
        status: int,
        started: float,
        upstream_s: float,
        media_type: str = "application/json",
    ) -> Reply:
        overhead_ms = (time.perf_counter() - started - upstream_s) * 1000
        self.metrics.overhead.observe(overhead_ms / 1000)
        return Reply(
            status,
            content,
            media_type.encode("latin-1"),
            [(OVERHEAD, f"{overhead_ms:.3f}".encode())],
        )

    def refuse(self, exc: GatewayError, started: float, oip: bool = False) -> Reply:
        """The refusal in the route's protocol: OIP's shape on /v2, else OpenAI's."""
        self.metrics.rejection(exc.reason).inc()
        body = oip_error_body(str(exc)) if oip else error_body(str(exc), exc.kind, exc.reason)
        reply = self.json_reply(body, exc.status, started, exc.upstream_s)
        if exc.retry_after_s is not None:
            reply.headers.append((b"retry-after", str(exc.retry_after_s).encode()))
        if exc.close_connection:  # uvicorn closes after a response that says so
            reply.headers.append((b"connection", b"close"))
        return reply


def _model_object(name: str) -> dict[str, object]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "podserve"}
