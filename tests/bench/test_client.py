"""The raw client against a real uvicorn server."""

from __future__ import annotations

import orjson
import pytest

from podserve.bench.client import ConnectionClosed, RequestTimeout, open_connection
from podserve.bench.sse import TokenStreamMeter
from podserve.bench.wire import encode_request

from .conftest import STREAM_TOKENS

HOST = "127.0.0.1"


def _get(port: int, path: str) -> bytes:
    return encode_request("GET", f"{HOST}:{port}", path)


async def test_keep_alive_reuses_one_connection(server_port: int) -> None:
    conn = await open_connection(HOST, server_port)
    try:
        first = await conn.request(_get(server_port, "/port"))
        second = await conn.request(_get(server_port, "/port"))
    finally:
        conn.close()
    assert first.status == second.status == 200
    assert first.keep_alive
    assert orjson.loads(first.body)["port"] == orjson.loads(second.body)["port"]


@pytest.mark.parametrize("code", [200, 201, 400, 404, 429, 503])
async def test_status_codes_are_reported(server_port: int, code: int) -> None:
    conn = await open_connection(HOST, server_port)
    try:
        response = await conn.request(_get(server_port, f"/status/{code}"))
        # The connection survives an error status.
        again = await conn.request(_get(server_port, "/status/200"))
    finally:
        conn.close()
    assert response.status == code
    assert again.status == 200


async def test_post_body_round_trips(server_port: int) -> None:
    body = orjson.dumps(
        {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1.5, 2.5]}]}
    )
    conn = await open_connection(HOST, server_port)
    try:
        response = await conn.request(
            encode_request("POST", f"{HOST}:{server_port}", "/v2/models/m/infer", body)
        )
    finally:
        conn.close()
    assert response.status == 200
    assert orjson.loads(response.body)["outputs"][0]["data"] == [1.5, 2.5]


async def test_connection_close_header_closes_the_connection(server_port: int) -> None:
    conn = await open_connection(HOST, server_port)
    response = await conn.request(_get(server_port, "/close"))
    assert response.status == 200
    assert not response.keep_alive
    assert conn.closed
    with pytest.raises(ConnectionClosed):
        await conn.request(_get(server_port, "/port"))


async def test_chunked_sse_stream_is_metered(server_port: int) -> None:
    body = orjson.dumps({"model": "m", "messages": [], "stream": True})
    meter = TokenStreamMeter()
    conn = await open_connection(HOST, server_port)
    try:
        response = await conn.request(
            encode_request("POST", f"{HOST}:{server_port}", "/v1/chat/completions", body),
            sink=meter.feed,
        )
        # The stream ended cleanly: the connection carries the next request.
        after = await conn.request(_get(server_port, "/status/204"))
    finally:
        conn.close()
    assert response.status == 200
    assert response.body == b""  # streamed bytes went to the sink
    assert meter.done
    assert len(meter.token_times_s) == len(STREAM_TOKENS)
    assert meter.output_tokens == 4
    assert meter.token_times_s == sorted(meter.token_times_s)
    assert after.status == 204


async def test_timeout_raises_and_drops_the_connection(server_port: int) -> None:
    conn = await open_connection(HOST, server_port)
    with pytest.raises(RequestTimeout):
        await conn.request(_get(server_port, "/hang"), timeout_s=0.05)
    assert conn.closed


async def test_connect_refused_raises_oserror() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port = sock.getsockname()[1]  # bound but not listening: nothing accepts
        with pytest.raises(ConnectionRefusedError):
            await open_connection(HOST, port)
