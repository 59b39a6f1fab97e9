"""The server process: build the pieces, serve HTTP and gRPC on one event loop, load
models in the background, and drain on SIGTERM (DESIGN.md §2).

SIGTERM: readiness fails at once; new inference gets 503 + Connection: close +
Retry-After; everything admitted (queued or running) finishes; the process exits when
nothing is in flight, or when drain_timeout_s expires (logging how many requests it cut,
exit code 1). A second SIGTERM or SIGINT exits at once. Probes answer throughout.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass

import uvicorn

from podserve.config.settings import ServerSettings
from podserve.dataplane.build import build_dataplane
from podserve.httpedge.limits import HttpLimits, bounded_protocol
from podserve.server.app import App
from podserve.server.http_server import HttpServer

log = logging.getLogger("podserve.server")

EXIT_OK = 0
EXIT_CUT = 1
# How long cut requests get to send their 503 before the server stops anyway.
_CUT_ANSWER_S = 1.0


class CannotListen(OSError):
    """A listener could not bind (the port is in use, the address is not this host's):
    a startup error the CLI reports in one line with exit code 2, not a traceback."""


def _bind_http(host: str, port: int) -> socket.socket:
    """Bind the HTTP listener as uvicorn's `Config.bind_socket` does for a host and port
    (SO_REUSEADDR, IPv6 when the host has a colon), but raise instead of uvicorn's
    `sys.exit(1)`, so that a port in use is reported, and nothing has started yet."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise CannotListen(f"cannot listen for HTTP on {host}:{port}: {exc.strerror}") from None
    return sock


@dataclass(frozen=True, slots=True)
class Listening:
    http_port: int
    grpc_port: int | None


def http_config(settings: ServerSettings, app: App) -> uvicorn.Config:
    """uvicorn's settings for the pod's HTTP edge (tests serve an in-process app with
    them, on a socket of their own)."""
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        # No X-Forwarded-* rewriting: nothing in the pod reads the client's address, and
        # uvicorn's ProxyHeadersMiddleware wrapped every request (as on the gateway).
        proxy_headers=False,
        # Exits happen only after our own drain, so uvicorn need not wait again.
        timeout_graceful_shutdown=1,
        limit_concurrency=None,  # httpedge/limits.py caps connections, answering JSON
        # No WebSocket protocol: the pod serves none, and uvicorn's default ("auto") hands
        # any request with `Upgrade: websocket` to the websockets library, whose scope the
        # app ignores: a plain-text 500 and an error log. Without one, uvicorn
        # (httptools_impl.py `_should_upgrade`) serves it as the HTTP request it also is.
        ws="none",
        timeout_keep_alive=settings.keep_alive_timeout_s,
        http=bounded_protocol(
            HttpLimits(
                max_header_bytes=settings.max_header_bytes,
                header_timeout_s=settings.header_timeout_s,
                max_connections=settings.max_connections,
                body_timeout_s=settings.body_timeout_s,
                refuse_content_encoding=True,  # no route decodes gzip or any other coding
            )
        ),
    )


async def serve(
    settings: ServerSettings, on_listening: Callable[[Listening], None] | None = None
) -> int:
    loop = asyncio.get_running_loop()
    # Bind before anything starts: a port in use ends the process with nothing to undo.
    sock = _bind_http(settings.host, settings.port)
    dataplane = build_dataplane(settings, loop)
    app = App(dataplane)
    config = http_config(settings, app)
    server = HttpServer(config)
    grpc_server = None
    grpc_port: int | None = None
    if settings.grpc_port >= 0:
        from podserve.server.grpc.limits import GrpcLimits
        from podserve.server.grpc.server import start_grpc_server

        try:
            grpc_server, grpc_port = await start_grpc_server(
                dataplane,
                settings.host,
                settings.grpc_port,
                max_message_bytes=settings.max_body_bytes,
                inflight=app.inflight,  # one registry: a drain timeout cuts both edges' calls
                decoding=app.decoding,  # one decoding thread for both edges
                limits=GrpcLimits.from_settings(settings),
            )
        except OSError as exc:
            sock.close()
            dataplane.stop()
            await dataplane.close()
            raise CannotListen(str(exc)) from None

    exit_code = EXIT_OK
    signals_seen = 0
    drain_task: asyncio.Task[None] | None = None

    async def drain() -> None:
        nonlocal exit_code
        inflight = dataplane.inflight
        log.info(
            "SIGTERM: draining",
            extra={"inflight": inflight, "drain_timeout_s": settings.drain_timeout_s},
        )
        cut = await dataplane.drain(settings.drain_timeout_s)
        if not cut:
            log.info("drain complete; exiting")
        else:
            exit_code = EXIT_CUT
            log.error(
                "drain timeout expired; cutting in-flight requests",
                extra={"cut_requests": cut, "drain_timeout_s": settings.drain_timeout_s},
            )
            # Each cut REST request answers a JSON 503 (or a last event on its stream),
            # each cut gRPC call ends UNAVAILABLE (server/grpc/cut.py), and each logs
            # one line (server/cut.py), all before the listeners stop.
            await app.inflight.cut(timeout_s=_CUT_ANSWER_S)
        server.exit_now()

    def on_signal(signum: int) -> None:
        nonlocal signals_seen, drain_task, exit_code
        signals_seen += 1
        if signals_seen == 1 and signum == signal.SIGTERM:
            dataplane.begin_drain()
            drain_task = asyncio.ensure_future(drain())
            return
        cut = dataplane.inflight
        log.warning(
            "second signal or SIGINT: exiting now",
            extra={"signal": signal.Signals(signum).name, "cut_requests": cut},
        )
        if cut:
            exit_code = EXIT_CUT
        dataplane.begin_drain()
        app.inflight.cutting = True  # the requests uvicorn cancels answer a JSON 503
        server.exit_now(force=True)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)

    # Listen before serving, so the port (even an ephemeral one) is known and connections
    # queue in the backlog from this moment.
    sock.listen(config.backlog)
    http_port = sock.getsockname()[1]
    serve_task = asyncio.ensure_future(server.serve(sockets=[sock]))
    listening = Listening(http_port=http_port, grpc_port=grpc_port)
    log.info("podserve listening", extra={"http_port": http_port, "grpc_port": grpc_port})
    if on_listening is not None:
        on_listening(listening)
    loader = asyncio.ensure_future(dataplane.load_preloaded())
    try:
        await serve_task
    finally:
        dataplane.stop()
        loader.cancel()
        if grpc_server is not None:
            from podserve.server.grpc.server import stop_grpc_server

            # Nothing of ours is in flight after a clean drain; after a cut or a second
            # signal, what is left is cancelled now.
            grace_s = 0 if server.force_exit or exit_code != EXIT_OK else 1.0
            await stop_grpc_server(grpc_server, grace_s=grace_s)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        app.close()
        await dataplane.close()
    # The last line before the process leaves (server/exit.py); what follows it is the
    # log flush, os._exit and the kernel releasing the memory (benchmarks/exit_tail.py).
    log.info("server stopped", extra={"exit_code": exit_code})
    return exit_code
