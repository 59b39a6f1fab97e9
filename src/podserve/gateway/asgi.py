"""The gateway's HTTP edge as a bare ASGI app: a route table, the request body under a cap,
and replies sent as two ASGI messages.

Why not Starlette: every proxied request paid for its middleware stack (server-error and
exception middleware, each wrapping `send`), a regex router over every route, and the
`Request`/`Response` objects and header multidicts, none of which the proxy needs. With
py-spy on the benchmark's OIP W1 load (benchmarks/gateway.py --profile) those layers were
about a sixth of the gateway's CPU per request; the ASGI messages themselves are the
contract uvicorn speaks (asgiref's spec, "HTTP" and "Lifespan" sections,
https://asgi.readthedocs.io/en/latest/specs/www.html).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from podserve.gateway.errors import BodyTooLarge
from podserve.gateway.wire import error_body, error_type, is_oip, oip_error_body

log = logging.getLogger("podserve.gateway")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

JSON = b"application/json"


class ClientGone(Exception):
    """The client disconnected before its request body was complete."""


@dataclass(slots=True)
class Call:
    """One HTTP request as the handlers see it."""

    scope: Scope
    receive: Receive
    send: Send
    params: dict[str, str]

    @property
    def path(self) -> str:
        """The path to forward. An OIP model path is rebuilt from its matched segments,
        each percent-encoded whole (`Routes.match`): the ASGI path is already decoded
        once, and sent on as it was, a `%2F` or `?` in a version was decoded again by the
        pod and reached another route than the one admitted here
        (`.../versions/1%252Fgenerate%3F/infer` ran the pod's unbilled `generate`)."""
        return self.params.get("path") or str(self.scope["path"])

    def headers_named(self, names: tuple[bytes, ...]) -> list[tuple[bytes, bytes]]:
        """The request's headers with these names, as sent (first value of each)."""
        found = [(name, self.header(name)) for name in names]
        return [(name, value.encode("latin-1")) for name, value in found if value is not None]

    def header(self, name: bytes) -> str | None:
        """A request header by lower-case name (ASGI lower-cases them), first value."""
        for key, value in self.scope["headers"]:
            if key == name:
                return bytes(value).decode("latin-1")
        return None

    async def body(self, limit: int, held: Callable[[int], None] | None = None) -> bytes:
        """The whole body, refused past `limit` bytes before it is all held in memory.
        `held(size)` is told the bytes held so far as they arrive (a body without
        Content-Length counts among the bytes in flight while it comes, not only once it
        is whole); it may refuse by raising. How long it may take is the protocol's
        (`bodyTimeoutS`, httpedge/limits.py): past it the connection is answered 408 and
        closed, and `receive` here sees the disconnect."""
        declared = self.header(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge(f"request body over {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            chunk: bytes = message.get("body", b"")
            more = message.get("more_body", False)
            if not more and not chunks:  # the usual case: one message
                if len(chunk) > limit:
                    raise BodyTooLarge(f"request body over {limit} bytes")
                return chunk
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(f"request body over {limit} bytes")
            if held is not None:
                held(size)
            chunks.append(chunk)
            if not more:
                return b"".join(chunks)


@dataclass(slots=True)
class Reply:
    """A complete response; `after` runs once the body is sent (settlement: the store's
    round trip is not the client's wait); `done` runs when the reply is over, sent or
    not (it ends the request's place among those in flight)."""

    status: int
    body: bytes
    content_type: bytes = JSON
    headers: Headers = field(default_factory=list)
    after: Callable[[], Awaitable[None]] | None = None
    done: Callable[[], None] | None = None

    async def send_to(self, send: Send) -> None:
        headers = [
            (b"content-type", self.content_type),
            (b"content-length", str(len(self.body)).encode()),
            *self.headers,
        ]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": self.body, "more_body": False})


# A handler answers with a Reply, or None when it sent the response itself (a stream).
Handler = Callable[[Call], Awaitable[Reply | None]]


def _error(status: int, message: str, path: str = "") -> Reply:
    if is_oip(path):
        return Reply(status, oip_error_body(message))
    return Reply(status, error_body(message, error_type(status)))


class Routes:
    """Exact paths, plus the OIP v2 model paths, which carry the model (and version) name:
    `/v2/models/{m}`, `/v2/models/{m}/ready`, `/v2/models/{m}/infer`, and the same under
    `/v2/models/{m}/versions/{v}` (a name is one non-empty path segment), and prefixes
    followed by a name (`/v1/models/{id}`)."""

    def __init__(self) -> None:
        self._exact: dict[str, dict[str, Handler]] = {}
        self._prefixed: dict[str, dict[str, Handler]] = {}
        self._v2: dict[str, dict[str, Handler]] = {}

    def add(self, method: str, path: str, handler: Handler) -> None:
        self._exact.setdefault(path, {})[method] = handler

    def add_prefix(self, method: str, prefix: str, handler: Handler) -> None:
        """`prefix` then one name, "/" included (an OpenAI model id may hold one): the
        name is `params["name"]`."""
        self._prefixed.setdefault(prefix, {})[method] = handler

    def add_v2(self, method: str, shape: str, handler: Handler) -> None:
        """`shape`: "" (metadata), "ready" or "infer"; "versions/" + one of them for the
        versioned path (`params["version"]`)."""
        self._v2.setdefault(shape, {})[method] = handler

    def match(self, path: str) -> tuple[dict[str, Handler], dict[str, str]] | None:
        found = self._exact.get(path)
        if found is not None:
            return found, {}
        for prefix, named in self._prefixed.items():
            if path.startswith(prefix) and len(path) > len(prefix):
                return named, {"name": path[len(prefix) :]}
        if not path.startswith("/v2/models/"):
            return None
        parts = path[len("/v2/models/") :].split("/")
        if not all(parts):
            return None
        params = {
            "model": parts[0],
            "path": "/v2/models/" + "/".join(quote(p, safe="") for p in parts),
        }
        shape = ""
        if len(parts) >= 3 and parts[1] == "versions":
            shape = "versions/"
            params["version"] = parts[2]
            del parts[1:3]
        if len(parts) == 2 and parts[1] in ("ready", "infer"):
            shape += parts[1]
        elif len(parts) != 1:
            return None
        methods = self._v2.get(shape)
        return None if methods is None else (methods, params)


class App:
    """The ASGI callable: lifespan to `startup`/`shutdown`, HTTP to the route table."""

    def __init__(
        self,
        routes: Routes,
        startup: Callable[[], Awaitable[None]],
        shutdown: Callable[[], Awaitable[None]],
        overhead_header: bytes | None = None,
    ) -> None:
        self._routes = routes
        self._startup = startup
        self._shutdown = shutdown
        # Stamped on the app's own refusals (404, 405, 500) with the time they took, so
        # that every response carries it; handlers stamp their own replies.
        self._overhead_header = overhead_header

    def _refusal(self, status: int, message: str, started: float, path: str = "") -> Reply:
        reply = _error(status, message, path)
        if self._overhead_header is not None:
            elapsed_ms = (time.perf_counter() - started) * 1000
            reply.headers.append((self._overhead_header, f"{elapsed_ms:.3f}".encode()))
        return reply

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        matched = self._routes.match(scope["path"])
        if matched is None:
            await self._refusal(404, f"no route {scope['path']}", started, scope["path"]).send_to(
                send
            )
            return
        methods, params = matched
        handler = methods.get(scope["method"])
        if handler is None:
            refusal = self._refusal(
                405, f"method {scope['method']} not allowed here", started, scope["path"]
            )
            refusal.headers.append((b"allow", ", ".join(sorted(methods)).encode()))
            await refusal.send_to(send)
            return
        reply: Reply | None = None
        try:
            reply = await handler(Call(scope, receive, send, params))
            if reply is not None:
                try:
                    await reply.send_to(send)
                finally:
                    # The settlement runs whether or not the reply could be sent: the
                    # upstream did the work either way, and a hold left unsettled is
                    # charged in full when its lease runs out.
                    if reply.after is not None:
                        await reply.after()
        except ClientGone:
            return
        except Exception:
            log.exception("gateway request failed", extra={"path": scope["path"]})
            # A response already under way cannot become a 500: uvicorn refuses a second
            # start with RuntimeError (uvicorn/protocols/http/httptools_impl.py, send) and
            # closes the connection, which is all that is left to do.
            with contextlib.suppress(RuntimeError):
                await self._refusal(500, "internal gateway error", started, scope["path"]).send_to(
                    send
                )
        finally:
            if reply is not None and reply.done is not None:
                reply.done()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self._startup()
                except Exception as exc:
                    log.exception("gateway startup failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                try:
                    await self._shutdown()
                finally:
                    await send({"type": "lifespan.shutdown.complete"})
                return
