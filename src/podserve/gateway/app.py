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

import orjson

from podserve.config.egress_proxy import NO_PROXIES, ProxySettings
from podserve.config.gateway_config import GatewayConfig
from podserve.gateway.accounting import Accounting, Admission
from podserve.gateway.asgi import App, Call, Headers, Reply, Routes
from podserve.gateway.body_parse import BodyParser
from podserve.gateway.budget import Usage
from podserve.gateway.errors import (
    GatewayError,
    InvalidRequest,
    Overloaded,
    UnknownModel,
    shown,
)
from podserve.gateway.forward import UPSTREAM_ERRORS, Attempted, Forwarder, upstream_failed
from podserve.gateway.housekeeping import housekeep
from podserve.gateway.inflight import InFlight, Ticket
from podserve.gateway.metrics import CONTENT_TYPE, GatewayMetrics
from podserve.gateway.oip_routes import OipRoutes
from podserve.gateway.relay import relay_stream
from podserve.gateway.retry_budget import RetryBudget
from podserve.gateway.routing import Router
from podserve.gateway.scrape import Scraper
from podserve.gateway.sse import EventRelay, StreamTally
from podserve.gateway.store.base import Outcome, Store
from podserve.gateway.upstream_http import Header, ResponseTooLarge
from podserve.gateway.usage import billed_usage, held_usage
from podserve.gateway.wire import (
    BINARY_JSON_LENGTH,
    NOT_IN_POOLS,
    OVERHEAD,
    OVERHEAD_HEADER,
    REQUEST_ID,
    UPSTREAM,
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
        deadline = self.accounting.deadline()  # the store's, over lookup and reservation
        try:
            key = await self.accounting.authenticate(call.header(b"authorization"), deadline)
            reading = time.monotonic()
            raw = await self._body(call, ticket)
            deadline += time.monotonic() - reading  # the client's upload is not store time
            if endpoint is Endpoint.V2:
                # OIP bodies are forwarded byte for byte: nothing in them is billed.
                model = call.params["model"]
                bill = Billable(model, endpoint, False, False, None, "", 1, (), 0)
                body = raw
            else:
                parsed, bill = await self.parser.parse(raw, endpoint)
            if not self.router.knows(bill.model, hosted=endpoint is not Endpoint.V2):
                where = NOT_IN_POOLS if endpoint is Endpoint.V2 else "is not served by this gateway"
                raise UnknownModel(f"model '{shown(bill.model)}' {where}")
            admission = await self.accounting.admit(key, bill, rid, deadline)
        except BadRequest as exc:
            return self.refuse(InvalidRequest(str(exc)), started, endpoint is Endpoint.V2)
        except GatewayError as exc:
            return self.refuse(exc, started, endpoint is Endpoint.V2)
        renamed = None
        passed: list[Header] = []
        if endpoint is Endpoint.V2:
            passed = call.headers_named(V2_BODY_HEADERS)
        else:
            force_usage = bill.stream and endpoint is not Endpoint.EMBEDDINGS
            body = await self.parser.run(
                len(raw), forwarded_body, parsed, bill, admission.max_tokens, force_usage
            )
            if self.router.renamed(bill.model):
                renamed = partial(forwarded_body, parsed, bill, admission.max_tokens, force_usage)
            del parsed  # a big body's objects go now, not when its response has been relayed
        try:
            attempt = await self.forwarder.send(
                bill.model, call.path, body, rid, renamed=renamed, passed=passed
            )
        except GatewayError as exc:
            await self._settle(admission, Usage(0, 0), Outcome.ERROR, "", exc.status)
            return self.refuse(exc, started, endpoint is Endpoint.V2)
        response = attempt.response
        is_sse = response.headers.get("content-type", "").startswith("text/event-stream")
        if response.status == 200 and is_sse:
            await self._stream(call, attempt, admission, bill, started, rid)
            return None
        try:
            content = await response.read(self.config.max_response_bytes)
        except (*UPSTREAM_ERRORS, ResponseTooLarge) as exc:
            self.forwarder.finished(attempt, False)
            # Too large: the upstream did the work, and its usage is in the body not read.
            usage = (
                held_usage(admission.prompt_tokens, admission.max_tokens, bill.choices)
                if isinstance(exc, ResponseTooLarge)
                else Usage(0, 0)
            )
            await self._settle(admission, usage, Outcome.ERROR, attempt.target.upstream, 502)
            return self.refuse(upstream_failed(exc), started, endpoint is Endpoint.V2)
        finally:
            response.release()
        upstream_s = attempt.upstream_s
        self.forwarder.finished(attempt, response.status < 500)
        outcome = Outcome.ERROR if response.status >= 400 else Outcome.OK
        if endpoint is Endpoint.V2 or outcome is Outcome.ERROR:
            # v2: no tokens to bill (the body is not parsed); an error generated nothing
            usage = Usage(0, 0)
        else:
            usage = billed_usage(
                content, admission.prompt_tokens, admission.max_tokens, bill.choices
            )
        reply = self.json_reply(
            content,
            response.status,
            started,
            upstream_s,
            response.headers.get("content-type", "application/json"),
        )
        upstream = attempt.target.upstream
        reply.headers += ((UPSTREAM, upstream.encode()), (REQUEST_ID, rid.encode()))
        binary_json = response.headers.get(BINARY_JSON_LENGTH.decode())
        if endpoint is Endpoint.V2 and binary_json is not None:
            reply.headers.append((BINARY_JSON_LENGTH, binary_json.encode("latin-1")))
        status = response.status

        async def settle() -> None:
            # After the body is sent: the store's round trip is not the client's wait.
            await self._settle(admission, usage, outcome, upstream, status)

        reply.after = settle
        return reply

    async def _stream(
        self,
        call: Call,
        attempt: Attempted,
        admission: Admission,
        bill: Billable,
        started: float,
        rid: str,
    ) -> None:
        upstream = attempt.target.upstream

        async def finish(outcome: Outcome, tally: StreamTally) -> None:
            self.forwarder.finished(attempt, True)
            if tally.usage is not None:
                # Never less than was relayed: an upstream that reports its usage and
                # then goes on sending tokens was billed for the tokens before it only.
                reported = tally.usage
                completion = max(reported.completion_tokens, tally.tokens_sent)
                usage, final = Usage(reported.prompt_tokens, completion), Outcome.OK
            elif outcome is Outcome.CANCELLED:
                usage, final = Usage(admission.prompt_tokens, tally.tokens_sent), outcome
            else:  # finished without a usage chunk: charge the whole hold
                held = held_usage(admission.prompt_tokens, admission.max_tokens, bill.choices)
                usage, final = held, Outcome.OK
            await self._settle(admission, usage, final, upstream, 200)

        overhead_ms = (time.perf_counter() - started - attempt.upstream_s) * 1000
        self.metrics.overhead.observe(overhead_ms / 1000)
        headers: Headers = [
            (OVERHEAD, f"{overhead_ms:.3f}".encode()),
            (UPSTREAM, upstream.encode()),
            (REQUEST_ID, rid.encode()),
            (b"cache-control", b"no-cache"),
        ]
        await relay_stream(
            attempt.response,
            EventRelay(bill.wants_usage),
            headers,
            finish,
            call.receive,
            call.send,
        )

    # --- helpers ---------------------------------------------------------------------
    async def _settle(
        self, admission: Admission, usage: Usage, outcome: Outcome, upstream: str, code: int
    ) -> None:
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
