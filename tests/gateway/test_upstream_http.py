"""The gateway's upstream HTTP/1.1 client against real loopback servers: a scripted
asyncio server (to say exactly what goes on the wire: chunks, closes, stalls, malformed
bytes) and a TLS one. Every test runs on asyncio's loop and on uvloop, which the gateway
runs on (their transports differ: uvloop's are not asyncio.Transport subclasses)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from podserve.gateway.upstream_http import (
    ResponseTooLarge,
    UpstreamClient,
    UpstreamError,
    UpstreamTimeout,
    parse_url,
)
from tests.support.tls import self_signed

Respond = Callable[[bytes, bytes, asyncio.StreamWriter], Awaitable[bool]]


def ok(body: bytes, *extra: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n" + b"".join(extra)
    return head + b"content-length: %d\r\n\r\n%s" % (len(body), body)


class Scripted:
    """A loopback HTTP/1.1 server: `respond(head, body, writer)` answers each request and
    says whether to read the next one on the same connection."""

    def __init__(self, respond: Respond, tls: ssl.SSLContext | None = None) -> None:
        self._respond = respond
        self._tls = tls
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.client_left = asyncio.Event()
        self.request_seen = asyncio.Event()
        self.reader: asyncio.StreamReader | None = None
        self.port = 0

    async def __aenter__(self) -> Scripted:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self._tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        self._server.close()

    def url(self, path: str = "/v1/x") -> Any:
        scheme = "https" if self._tls else "http"
        return parse_url(f"{scheme}://127.0.0.1:{self.port}{path}")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    self.client_left.set()
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                self.requests.append((head, body))
                self.request_seen.set()
                self.reader = reader
                if not await self._respond(head, body, writer):
                    return
        finally:
            writer.close()


async def _until_the_client_leaves(server: Scripted) -> bool:
    """Answer nothing; read until the client closes the connection."""
    assert server.reader is not None
    assert await server.reader.read(1) == b""
    server.client_left.set()
    return False


async def _json(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(ok(b'{"echo":%d}' % len(body)))
    return True


def test_keep_alive_reuses_one_connection_and_sends_the_headers(run: Any) -> None:
    async def main() -> None:
        async with Scripted(_json) as server:
            client = UpstreamClient(1, 5)
            for _ in range(20):
                r = await client.request(b"POST", server.url(), b"{}", [(b"x-request-id", b"r1")])
                assert (r.status, await r.read(1000)) == (200, b'{"echo":2}')
                assert r.headers["content-type"] == "application/json"
                r.release()
            await client.close()
        assert server.connections == 1
        assert client.connections_made == 1
        head = server.requests[0][0].lower()
        assert head.startswith(b"post /v1/x http/1.1\r\n")
        for line in (
            b"host: 127.0.0.1:%d" % server.port,
            b"content-length: 2",
            b"x-request-id: r1",
        ):
            assert line in head

    run(main())


def test_a_get_has_no_body_headers(run: Any) -> None:
    async def main() -> None:
        async with Scripted(_json) as server:
            client = UpstreamClient(1, 5)
            r = await client.request(b"GET", server.url("/metrics"), b"", ())
            await r.read(100)
            r.release()
            await client.close()
        assert b"content-length" not in server.requests[0][0].lower()

    run(main())


def test_idle_connections_past_idle_s_are_not_reused(run: Any) -> None:
    async def main() -> None:
        async with Scripted(_json) as server:
            client = UpstreamClient(1, 5, idle_s=0.05)
            for _ in range(2):
                r = await client.request(b"POST", server.url(), b"", ())
                await r.read(100)
                r.release()
                await asyncio.sleep(0.1)  # longer than idle_s: the connection is stale
            await client.close()
        assert client.connections_made == 2

    run(main())


def test_a_connection_the_server_closed_while_idle_is_not_used(run: Any) -> None:
    async def main() -> None:
        async def once(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
            writer.write(ok(b"{}"))  # keep-alive by default, then closed anyway
            await writer.drain()
            return False

        async with Scripted(once) as server:
            client = UpstreamClient(1, 5)
            for _ in range(3):
                r = await client.request(b"POST", server.url(), b"", ())
                assert await r.read(100) == b"{}"
                r.release()
                for _ in range(200):  # until the client has seen the close
                    if all(c.lost for q in client._idle.values() for c in q):
                        break
                    await asyncio.sleep(0.005)
            await client.close()
        assert server.connections == 3

    run(main())


def test_chunks_arrive_as_the_server_sends_them(run: Any) -> None:
    async def main() -> None:
        got_first = asyncio.Event()

        async def stream(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
            writer.write(b"transfer-encoding: chunked\r\n\r\n6\r\ndata 1\r\n")
            await got_first.wait()  # the second chunk only after the client had the first
            writer.write(b"6\r\ndata 2\r\n0\r\n\r\n")
            return True

        async with Scripted(stream) as server:
            client = UpstreamClient(1, 5)
            r = await client.request(b"POST", server.url(), b"{}", ())
            seen = []
            async for chunk in r.chunks():
                seen.append(chunk)
                got_first.set()
            r.release()
            assert seen[0] == b"data 1"
            assert b"".join(seen) == b"data 1data 2"
            r2 = await client.request(b"POST", server.url(), b"{}", ())  # reused after it
            r2.close()
            await client.close()
        assert server.connections == 1

    run(main())


def test_a_body_without_a_length_ends_at_the_close(run: Any) -> None:
    async def main() -> None:
        async def until_close(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\npart one, ")
            await writer.drain()
            writer.write(b"part two")
            return False

        async with Scripted(until_close) as server:
            client = UpstreamClient(1, 5)
            r = await client.request(b"POST", server.url(), b"", ())
            assert await r.read(1000) == b"part one, part two"
            r.release()
            await client.close()
        assert not client._idle.get(server.url().origin)

    run(main())


def test_connection_close_is_honoured(run: Any) -> None:
    async def main() -> None:
        async def closing(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
            writer.write(ok(b"{}", b"connection: close\r\n"))
            return False

        async with Scripted(closing) as server:
            client = UpstreamClient(1, 5)
            for _ in range(2):
                r = await client.request(b"POST", server.url(), b"", ())
                await r.read(100)
                r.release()
            await client.close()
        assert client.connections_made == 2

    run(main())


def test_an_upstream_that_does_not_answer_times_out(run: Any) -> None:
    async def main() -> None:
        async def silent(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
            return await _until_the_client_leaves(server)

        async with Scripted(silent) as server:
            client = UpstreamClient(1, 0.2)
            with pytest.raises(UpstreamTimeout) as raised:
                await client.request(b"POST", server.url(), b"", ())
            assert isinstance(raised.value, TimeoutError)
            await asyncio.wait_for(server.client_left.wait(), 5)  # the connection was closed
            await client.close()

    run(main())


def test_a_body_that_stalls_times_out_and_a_cut_one_fails(run: Any) -> None:
    async def main() -> None:
        async def stall(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")
            if body == b"cut":
                await writer.drain()
                return False  # closed 90 bytes short
            await asyncio.sleep(30)
            return False

        async with Scripted(stall) as server:
            client = UpstreamClient(1, 0.2)
            r = await client.request(b"POST", server.url(), b"stall", ())
            with pytest.raises(UpstreamTimeout):
                await r.read(1000)
            r.release()
            r = await client.request(b"POST", server.url(), b"cut", ())
            with pytest.raises(UpstreamError, match="closed"):
                await r.read(1000)
            r.release()
            await client.close()
        assert client.connections_made == 2  # neither broken connection was reused

    run(main())


def test_malformed_responses_and_refused_connections_are_errors(run: Any) -> None:
    async def main() -> None:
        async def garbage(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
            writer.write(b"SMTP ready\r\n\r\n")
            return True

        async with Scripted(garbage) as server:
            client = UpstreamClient(1, 5)
            with pytest.raises(UpstreamError, match="malformed"):
                await client.request(b"POST", server.url(), b"", ())
            port = server.port
        with pytest.raises(ConnectionRefusedError):
            await client.request(b"POST", parse_url(f"http://127.0.0.1:{port}/"), b"", ())
        await client.close()

    run(main())


def test_a_status_past_599_is_a_malformed_response(run: Any) -> None:
    """httptools takes any three digits; passed on, uvicorn had no status line for it and
    the client got no response at all."""

    async def main() -> None:
        async def weird(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
            writer.write(b"HTTP/1.1 799 Weird\r\ncontent-length: 2\r\n\r\n{}")
            return True

        async with Scripted(weird) as server:
            client = UpstreamClient(1, 5)
            with pytest.raises(UpstreamError, match="status 799"):
                await client.request(b"POST", server.url(), b"", ())
            await client.close()

    run(main())


def test_a_response_past_the_limit_is_refused(run: Any) -> None:
    async def main() -> None:
        async def big(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
            if body == b"chunked":
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                writer.write(b"400\r\n" + b"x" * 1024 + b"\r\n" + b"0\r\n\r\n")
            else:
                writer.write(ok(b"x" * 1024))
            return True

        async with Scripted(big) as server:
            client = UpstreamClient(1, 5)
            for body, message in ((b"declared", "1024 bytes"), (b"chunked", "over 1000")):
                r = await client.request(b"POST", server.url(), body, ())
                with pytest.raises(ResponseTooLarge, match=message):
                    await r.read(1000)
                r.release()
                assert r.content_length == (1024 if body == b"declared" else None)
            await client.close()

    run(main())


def test_a_cancelled_request_closes_its_connection(run: Any) -> None:
    async def main() -> None:
        async def slow(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
            return await _until_the_client_leaves(server)

        async with Scripted(slow) as server:
            client = UpstreamClient(1, 60)
            task = asyncio.create_task(client.request(b"POST", server.url(), b"{}", ()))
            await server.request_seen.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The server's read of the next request sees the close: the pod would abort.
            await asyncio.wait_for(server.client_left.wait(), 5)
            await client.close()

    run(main())


def test_header_values_with_line_breaks_are_refused(run: Any) -> None:
    async def main() -> None:
        async with Scripted(_json) as server:
            client = UpstreamClient(1, 5)
            with pytest.raises(ValueError, match="line break"):
                await client.request(
                    b"POST", server.url(), b"", [(b"authorization", b"Bearer k\r\nx-evil: 1")]
                )
            await client.close()
        assert server.requests == []

    run(main())


def test_informational_responses_and_no_content(run: Any) -> None:
    async def main() -> None:
        async def odd(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
            if body == b"204":
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"{}"))
            return True

        async with Scripted(odd) as server:
            client = UpstreamClient(1, 5)
            r = await client.request(b"POST", server.url(), b"100", ())
            assert (r.status, await r.read(10)) == (200, b"{}")
            r.release()
            r = await client.request(b"POST", server.url(), b"204", ())
            assert (r.status, await r.read(10)) == (204, b"")
            r.release()
            await client.close()
        assert server.connections == 1

    run(main())


def test_bytes_after_a_whole_response_make_the_connection_unusable(run: Any) -> None:
    async def main() -> None:
        async def extra(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
            writer.write(ok(b"{}") + ok(b'{"unasked":1}'))
            return True

        async with Scripted(extra) as server:
            client = UpstreamClient(1, 5)
            for _ in range(2):
                r = await client.request(b"POST", server.url(), b"", ())
                assert await r.read(100) == b"{}"
                r.release()
            await client.close()
        assert client.connections_made == 2

    run(main())


def test_a_large_body_is_sent_whole_while_the_loop_keeps_turning(run: Any) -> None:
    async def main() -> None:
        payload = bytes(range(256)) * (12 * 1024)  # 3 MiB
        turns = 0

        async def ticker() -> None:
            nonlocal turns
            while True:
                await asyncio.sleep(0)
                turns += 1

        async with Scripted(_json) as server:
            client = UpstreamClient(1, 5)
            tick = asyncio.create_task(ticker())
            turns_before = turns
            r = await client.request(b"POST", server.url(), payload, ())
            assert await r.read(100) == b'{"echo":%d}' % len(payload)
            tick.cancel()
            r.release()
            await client.close()
        assert server.requests[0][1] == payload
        assert turns - turns_before >= 40  # yielded between its 48 writes of 64 KiB

    run(main())


def test_reading_pauses_while_a_megabyte_is_unread(run: Any) -> None:
    async def main() -> None:
        size = 8 << 20
        sent_all = asyncio.Event()

        async def flood(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
            for _ in range(size >> 16):
                writer.write(b"z" * 65536)
                await writer.drain()
            sent_all.set()
            return True

        async with Scripted(flood) as server:
            client = UpstreamClient(1, 5)
            r = await client.request(b"POST", server.url(), b"", ())
            await asyncio.sleep(0.3)  # the server writes as fast as the client takes
            conn = r._conn
            assert conn is not None
            assert conn._buffered < 2 << 20
            assert not sent_all.is_set()
            assert len(await r.read(size)) == size
            r.release()
            await client.close()

    run(main())


def test_https_verifies_the_upstream_certificate(run: Any, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)

    async def main() -> None:
        serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving.load_cert_chain(cert, key)
        async with Scripted(_json, tls=serving) as server:
            trusting = UpstreamClient(2, 5, ssl_context=ssl.create_default_context(cafile=cert))
            r = await trusting.request(b"POST", server.url(), b"{}", ())
            assert await r.read(100) == b'{"echo":2}'
            r.release()
            await trusting.close()
            default = UpstreamClient(2, 5)  # the system's CAs do not know this certificate
            with pytest.raises(ssl.SSLCertVerificationError):
                await default.request(b"POST", server.url(), b"{}", ())
            await default.close()

    run(main())


def test_parse_url() -> None:
    u = parse_url("http://pod-0.svc:8000/v2/models/my model/infer")
    assert (u.host, u.port, u.host_header) == ("pod-0.svc", 8000, b"pod-0.svc:8000")
    assert u.target == b"/v2/models/my%20model/infer"
    u = parse_url("https://api.example.com/v1/chat/completions?x=1&y=%2F")
    assert (u.port, u.host_header, u.target) == (
        443,
        b"api.example.com",
        b"/v1/chat/completions?x=1&y=%2F",
    )
    u = parse_url("http://[::1]:9000")
    assert (u.host, u.host_header, u.target) == ("::1", b"[::1]:9000", b"/")
    for bad in ("ftp://x/", "http:///path", "no-scheme"):
        with pytest.raises(ValueError, match="not an http"):
            parse_url(bad)


def test_an_answer_before_the_whole_body_is_what_the_caller_gets(run: Any) -> None:
    """A server may refuse a large body from its headers alone (a 413) and close: the
    client stops sending, returns that answer, and does not reuse the connection."""

    async def main() -> None:
        async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")  # the headers, never the body
            body = b'{"error":"request body too large"}'
            writer.write(
                b"HTTP/1.1 413 Content Too Large\r\nconnection: close\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(refuse, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = UpstreamClient(1, 5)
        r = await client.request(
            b"POST", parse_url(f"http://127.0.0.1:{port}/"), b"x" * (32 << 20), ()
        )
        assert r.status == 413
        assert await r.read(1000) == b'{"error":"request body too large"}'
        r.release()
        assert not any(client._idle.values())
        await client.close()
        server.close()

    run(main())


def test_an_upstream_that_stops_reading_a_large_body_times_out(run: Any) -> None:
    async def main() -> None:
        stalled = asyncio.Event()

        async def never_reads(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await stalled.wait()  # reads nothing: the client's writes back up
            writer.close()

        server = await asyncio.start_server(never_reads, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = UpstreamClient(1, 0.3)
        with pytest.raises(UpstreamTimeout, match="no body bytes"):
            await client.request(
                b"POST", parse_url(f"http://127.0.0.1:{port}/"), b"x" * (64 << 20), ()
            )
        stalled.set()
        await client.close()
        server.close()

    run(main())
