from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podserve.bench.wire import ProtocolError, ResponseParser, encode_request

FIXED = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello"
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nTrailer: x\r\n\r\n"
)


def feed_in_pieces(parser: ResponseParser, data: bytes, cuts: list[int]) -> list[bool]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [parser.feed(data[a:b]) for a, b in itertools.pairwise(points)]


def test_encode_request_has_length_host_and_body() -> None:
    raw = encode_request("POST", "h:1", "/p", b'{"a":1}', {"X-Key": "v"})
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"POST /p HTTP/1.1"
    assert b"Host: h:1" in head
    assert b"Content-Length: 7" in head
    assert b"Content-Type: application/json" in head
    assert b"X-Key: v" in head
    assert body == b'{"a":1}'


def test_encode_get_has_no_body_headers() -> None:
    raw = encode_request("GET", "h:1", "/ready")
    assert b"Content-Length" not in raw
    assert raw.endswith(b"\r\n\r\n")


@given(st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_fixed_length_response_parses_whatever_the_split(cuts: list[int]) -> None:
    parser = ResponseParser()
    done = feed_in_pieces(parser, FIXED, cuts)
    assert done[-1]
    assert not any(done[:-1])
    assert (parser.status, parser.body, parser.keep_alive) == (200, b"hello", True)
    assert parser.headers["x-a"] == "b"


@given(st.lists(st.integers(min_value=0, max_value=200), max_size=12))
def test_chunked_response_parses_whatever_the_split(cuts: list[int]) -> None:
    parser = ResponseParser()
    done = feed_in_pieces(parser, CHUNKED, cuts)
    assert done[-1]
    assert not any(done[:-1])
    assert parser.body == b"hello, world"


@given(st.lists(st.integers(min_value=0, max_value=200), max_size=12))
def test_sink_receives_the_body_in_order(cuts: list[int]) -> None:
    received: list[bytes] = []
    parser = ResponseParser(received.append)
    feed_in_pieces(parser, CHUNKED, cuts)
    assert b"".join(received) == b"hello, world"
    assert parser.body == b""


def test_connection_close_and_http10_are_not_keep_alive() -> None:
    closing = ResponseParser()
    assert closing.feed(
        b"HTTP/1.1 503 Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    assert (closing.status, closing.keep_alive) == (503, False)
    old = ResponseParser()
    assert old.feed(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert not old.keep_alive


def test_body_until_close_completes_at_eof() -> None:
    parser = ResponseParser()
    assert not parser.feed(b"HTTP/1.1 200 OK\r\n\r\npartial ")
    assert not parser.feed(b"body")
    assert parser.feed_eof()
    assert parser.body == b"partial body"
    assert not parser.keep_alive


def test_eof_mid_fixed_body_is_incomplete() -> None:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    assert not parser.feed_eof()


def test_no_body_statuses_and_interim_responses() -> None:
    parser = ResponseParser()
    assert parser.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
    assert parser.status == 204


@pytest.mark.parametrize(
    "data",
    [
        b"SPDY/3 200 OK\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno-colon\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nabc",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab",
    ],
)
def test_malformed_responses_raise(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        ResponseParser().feed(data)


def test_oversized_head_raises() -> None:
    with pytest.raises(ProtocolError):
        ResponseParser().feed(b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 20000)
