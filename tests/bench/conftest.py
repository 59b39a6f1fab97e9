"""A real uvicorn server on 127.0.0.1:0, in a thread, serving the routes the bench tests need."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Iterator

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

STREAM_TOKENS = ("Hello", " wor", "ld", "!")


async def _client_port(request: Request) -> JSONResponse:
    # The client's source port names its connection: equal ports mean keep-alive worked.
    assert request.client is not None
    return JSONResponse({"port": request.client.port})


async def _status(request: Request) -> Response:
    return Response(b'{"error": "status"}', status_code=int(request.path_params["code"]))


async def _close(request: Request) -> Response:
    return Response(b"{}", headers={"Connection": "close"})


async def _infer(request: Request) -> JSONResponse:
    body = await request.json()
    first = body["inputs"][0]
    return JSONResponse(
        {
            "model_name": request.path_params["model"],
            "outputs": [
                {
                    "name": "echo",
                    "shape": first["shape"],
                    "datatype": first["datatype"],
                    "data": first["data"],
                }
            ],
        }
    )


async def _chat(request: Request) -> Response:
    body = await request.json()
    if not body.get("stream"):
        return JSONResponse({"choices": [{"message": {"content": "".join(STREAM_TOKENS)}}]})

    async def events() -> AsyncIterator[bytes]:
        yield b": keep-alive comment\n\n"
        yield b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
        for token in STREAM_TOKENS:
            chunk = {"choices": [{"delta": {"content": token}}]}
            yield b"data: " + JSONResponse(chunk).body + b"\n\n"
        yield b'data: {"choices":[],"usage":{"completion_tokens":4}}\n\n'
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


async def _truncated_stream(request: Request) -> Response:
    async def events() -> AsyncIterator[bytes]:
        yield b'data: {"choices":[{"delta":{"content":"only"}}]}\n\n'

    return StreamingResponse(events(), media_type="text/event-stream")


async def _hang(request: Request) -> Response:
    await asyncio.Event().wait()
    return Response(b"{}")


def build_app() -> Starlette:
    return Starlette(
        routes=[
            Route("/port", _client_port),
            Route("/status/{code:int}", _status, methods=["GET", "POST"]),
            Route("/close", _close),
            Route("/hang", _hang),
            Route("/v2/models/{model}/infer", _infer, methods=["POST"]),
            Route("/v1/chat/completions", _chat, methods=["POST"]),
            Route("/truncated/v1/chat/completions", _truncated_stream, methods=["POST"]),
        ]
    )


@pytest.fixture(scope="module")
def server_port() -> Iterator[int]:
    """Port of a real uvicorn server (module-scoped: starting one costs ~100 ms)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    # The socket is listening before the thread starts: connections wait in its backlog
    # until uvicorn accepts them, so no readiness polling is needed.
    config = uvicorn.Config(
        build_app(),
        log_level="warning",
        access_log=False,
        lifespan="off",
        ws="none",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
