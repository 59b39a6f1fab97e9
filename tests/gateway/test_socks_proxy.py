"""Egress through a SOCKS5 proxy: requests through a real microsocks (Debian's
`microsocks`, installed by .ci/run) to loopback upstreams, http and https alike tunnelled,
`socks5://` (the client resolves) and `socks5h://` (the proxy resolves), with and without
credentials, on asyncio's loop and on uvloop; then real gateway processes reaching and
scraping their pods through it. What microsocks cannot be made to do (every CONNECT reply
code, a garbled or over-long reply) is played by a small in-test server."""

from __future__ import annotations

import asyncio
import ipaddress
import shutil
import socket
import ssl
import subprocess
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from podserve.config.egress_proxy import ProxySettings, parse_proxy
from podserve.gateway.socks5 import SocksError
from podserve.gateway.upstream_http import UpstreamClient, UpstreamTimeout, parse_url
from tests.gateway.conftest import Pods, base_config
from tests.gateway.support import GatewayProcess, create_key
from tests.gateway.test_upstream_http import Scripted, _json
from tests.support.ports import free_port, listening
from tests.support.server import wait_until
from tests.support.tls import self_signed

USER, PASSWORD = "gw", "s3cret-pass"
# Where `localhost` leads: the system's first answer, which the client (socks5) and
# microsocks (socks5h) both take; 127.0.0.1 here, ::1 first on some machines.
LOCALHOST = str(socket.getaddrinfo("localhost", None, type=socket.SOCK_STREAM)[0][4][0])


# --- the proxy URL --------------------------------------------------------------------
def test_socks_urls_default_to_port_1080_and_carry_rfc_1929_credentials() -> None:
    proxy = parse_proxy("socks5h://us%40er:p%3Ass@proxy.corp", "test")
    assert (proxy.host, proxy.port, proxy.socks, proxy.tls) == (
        "proxy.corp",
        1080,
        "socks5h",
        False,
    )
    assert proxy.credentials == (b"us@er", b"p:ss")
    assert proxy.authorization is None  # no Proxy-Authorization header: SOCKS is no HTTP
    assert proxy.label == "socks5h proxy proxy.corp:1080"
    local = parse_proxy("socks5://10.0.0.9:9050", "test")
    assert (local.port, local.socks, local.credentials) == (9050, "socks5", None)
    settings = ProxySettings.from_env({"HTTPS_PROXY": "socks5h://p:1", "no_proxy": ".svc"})
    assert settings.for_origin("https", "api.openai.com", 443) is not None
    assert settings.for_origin("https", "pod.ml.svc", 443) is None


# --- a real SOCKS5 proxy ----------------------------------------------------------------
@dataclass
class Microsocks:
    port: int
    log: Path
    auth: bool

    def url(self, scheme: str = "socks5h", password: str = PASSWORD) -> str:
        userinfo = f"{USER}:{password}@" if self.auth else ""
        return f"{scheme}://{userinfo}127.0.0.1:{self.port}"

    def targets(self) -> list[str]:
        """Where it connected ("client[N] IP: connected to HOST:PORT"), as it was told:
        a name for socks5h, an address for socks5."""
        return [
            line.rsplit("connected to ", 1)[1]
            for line in self.log.read_text().splitlines()
            if "connected to " in line
        ]


def _start_microsocks(work: Path, auth: bool) -> tuple[subprocess.Popen[bytes], Microsocks]:
    binary = shutil.which("microsocks")
    if binary is None:
        pytest.skip("microsocks is not installed (Debian: apt-get install microsocks)")
    port = free_port()
    args = [binary, "-i", "127.0.0.1", "-p", str(port)]
    if auth:
        args += ["-u", USER, "-P", PASSWORD]
    log = work / f"microsocks-{port}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=out)
    wait_until(lambda: proc.poll() is not None or listening(port), 10, "microsocks listening")
    assert proc.poll() is None, log.read_text()
    return proc, Microsocks(port, log, auth)


@pytest.fixture(scope="module")
def microsocks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Microsocks]:
    """microsocks with username/password required (RFC 1929)."""
    proc, proxy = _start_microsocks(tmp_path_factory.mktemp("microsocks"), auth=True)
    try:
        yield proxy
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def open_microsocks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Microsocks]:
    """microsocks without authentication."""
    proc, proxy = _start_microsocks(tmp_path_factory.mktemp("microsocks"), auth=False)
    try:
        yield proxy
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def localhost_tls(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(the server's context, a client context that trusts it) for `localhost`: through
    socks5h the upstream is a name, and TLS checks the name (a certificate
    that names it)."""
    work = tmp_path_factory.mktemp("tls")
    cert_path, key_path = self_signed(work, "podserve socks test", dns_names=("localhost",))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_path, key_path)
    return server, ssl.create_default_context(cafile=str(cert_path))


class OnLocalhost(Scripted):
    """The scripted upstream on the address `localhost` leads to."""

    async def __aenter__(self) -> OnLocalhost:
        self._server = await asyncio.start_server(self._handle, LOCALHOST, 0, ssl=self._tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self


def _expected_target(scheme: str, host: str, port: int) -> str:
    """What microsocks logs for an upstream `host`: socks5 resolved a name here and sent
    the address; socks5h sent the name."""
    return f"{LOCALHOST if scheme == 'socks5' and host == 'localhost' else host}:{port}"


@pytest.mark.parametrize("upstream", ["http", "https"])
@pytest.mark.parametrize("scheme", ["socks5", "socks5h"])
def test_both_schemes_go_through_one_reused_tunnel(
    run: Callable[[Coroutine[Any, Any, Any]], Any],
    microsocks: Microsocks,
    request: pytest.FixtureRequest,
    scheme: str,
    upstream: str,
) -> None:
    """http in origin form (the upstream itself reads the request, not a proxy), https
    with TLS to the upstream inside the tunnel; two requests, one tunnel."""
    server_tls = client_tls = None
    if upstream == "https":
        server_tls, client_tls = request.getfixturevalue("localhost_tls")

    async def main() -> None:
        async with OnLocalhost(_json, tls=server_tls) as server:
            proxy = parse_proxy(microsocks.url(scheme), "test")
            proxies = (
                ProxySettings(http=proxy) if upstream == "http" else ProxySettings(https=proxy)
            )
            client = UpstreamClient(2, 5, ssl_context=client_tls, proxies=proxies)
            url = parse_url(f"{upstream}://localhost:{server.port}/v2/m/infer?x=1")
            before = len(microsocks.targets())
            try:
                for body in (b"{}", b"{ }"):
                    response = await client.request(b"POST", url, body, [])
                    assert response.status == 200
                    assert await response.read(1 << 20) == b'{"echo":%d}' % len(body)
                    response.release()
            finally:
                await client.close()
            assert [head.split(b" ")[1] for head, _ in server.requests] == [b"/v2/m/infer?x=1"] * 2
            assert server.connections == client.connections_made == 1
            target = _expected_target(scheme, "localhost", server.port)
            assert microsocks.targets()[before:] == [target]

    run(main())


def test_a_proxy_without_authentication_is_offered_none(
    run: Callable[[Coroutine[Any, Any, Any]], Any], open_microsocks: Microsocks
) -> None:
    async def main() -> None:
        async with Scripted(_json) as server:
            proxies = ProxySettings(http=parse_proxy(open_microsocks.url(), "test"))
            client = UpstreamClient(2, 5, proxies=proxies)
            try:
                response = await client.request(b"GET", server.url(), b"", [])
                assert response.status == 200
                response.release()
            finally:
                await client.close()
            assert f"127.0.0.1:{server.port}" in open_microsocks.targets()

    run(main())


@pytest.mark.parametrize(
    ("password", "message"),
    [
        ("wrong", "socks5h proxy 127.0.0.1:{port} refused the credentials"),
        # no credentials in the URL: only "no authentication" is offered, and refused (0xFF)
        (None, "socks5h proxy 127.0.0.1:{port} accepts none of the offered authentication"),
    ],
)
def test_credentials_the_proxy_refuses_are_its_error_not_the_upstreams(
    run: Callable[[Coroutine[Any, Any, Any]], Any],
    microsocks: Microsocks,
    password: str | None,
    message: str,
) -> None:
    url = (
        microsocks.url(password=password)
        if password is not None
        else f"socks5h://127.0.0.1:{microsocks.port}"
    )

    async def main() -> None:
        async with Scripted(_json) as server:
            client = UpstreamClient(2, 5, proxies=ProxySettings(http=parse_proxy(url, "test")))
            try:
                with pytest.raises(SocksError, match=message.format(port=microsocks.port)):
                    await client.request(b"GET", server.url(), b"", [])
            finally:
                await client.close()
            assert server.connections == 0

    run(main())


def test_an_upstream_the_proxy_cannot_reach_is_its_reply_code(
    run: Callable[[Coroutine[Any, Any, Any]], Any], microsocks: Microsocks
) -> None:
    closed = free_port()

    async def main() -> None:
        proxies = ProxySettings(http=parse_proxy(microsocks.url(), "test"))
        client = UpstreamClient(2, 5, proxies=proxies)
        try:
            message = f"could not connect to localhost:{closed}: connection refused \\(0x05\\)"
            with pytest.raises(SocksError, match=message):
                await client.request(b"GET", parse_url(f"http://localhost:{closed}/"), b"", [])
        finally:
            await client.close()

    run(main())


def test_no_proxy_hosts_go_direct(
    run: Callable[[Coroutine[Any, Any, Any]], Any], microsocks: Microsocks
) -> None:
    async def main() -> None:
        async with Scripted(_json) as server:
            env = {"http_proxy": microsocks.url(), "no_proxy": "localhost"}
            client = UpstreamClient(2, 5, proxies=ProxySettings.from_env(env))
            before = len(microsocks.targets())
            try:
                for host in ("localhost", "127.0.0.1"):  # direct, then through the proxy
                    url = parse_url(f"http://{host}:{server.port}/")
                    response = await client.request(b"GET", url, b"", [])
                    assert response.status == 200
                    response.release()
            finally:
                await client.close()
            assert microsocks.targets()[before:] == [f"127.0.0.1:{server.port}"]
            assert server.connections == 2

    run(main())


# --- gateway processes ------------------------------------------------------------------
# The pods listen on 127.0.0.1: named `localhost` where that is where the name leads, so a
# socks5h proxy gets names to resolve (an address otherwise, as through socks5).
POD_HOST = "localhost" if LOCALHOST == "127.0.0.1" else "127.0.0.1"


def _by_name(pods: Pods) -> dict[str, Any]:
    """The test config with the pods (and the hosted stand-in) named POD_HOST."""
    config = base_config(pods)
    for pool in config["pools"]:
        pool["endpoints"] = [e.replace("127.0.0.1", POD_HOST) for e in pool["endpoints"]]
    for fallback in config["fallbacks"]:
        fallback["baseUrl"] = fallback["baseUrl"].replace("127.0.0.1", POD_HOST)
    return config


def _completion(gateway: GatewayProcess) -> httpx.Response:
    key = create_key(gateway.config_path)
    return httpx.post(
        f"{gateway.url}/v1/completions",
        json={"model": "tiny-lm", "prompt": "hi", "max_tokens": 2},
        headers={"authorization": f"Bearer {key}"},
        timeout=60,
    )


@pytest.mark.parametrize(
    ("scheme", "variable"),
    [("socks5", "http_proxy"), ("socks5h", "http_proxy"), ("socks5h", "ALL_PROXY")],
)
def test_a_gateway_scrapes_and_reaches_its_pods_through_the_socks_proxy(
    pods: Pods, microsocks: Microsocks, tmp_path: Path, scheme: str, variable: str
) -> None:
    """ALL_PROXY, as curl and Python's clients read it, proxies a scheme without its own."""
    before = len(microsocks.targets())
    pod_a = pods.a.url.rsplit(":", 1)[1]
    target = _expected_target(scheme, POD_HOST, int(pod_a))
    env = {variable: microsocks.url(scheme), "HOSTED_API_KEY": "k"}
    with GatewayProcess(_by_name(pods), tmp_path, env=env) as gateway:
        # No request yet: a connection to the pod through the proxy is the scraper's.
        wait_until(lambda: target in microsocks.targets()[before:], 10, "a scrape via SOCKS")
        scraped = len(microsocks.targets())
        reply = _completion(gateway)
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 2
        # the request went through it too: the forwarder's own connection
        assert target in microsocks.targets()[scraped:]


def test_a_gateway_whose_socks_proxy_refuses_its_credentials_answers_503(
    pods: Pods, microsocks: Microsocks, tmp_path: Path
) -> None:
    env = {"http_proxy": microsocks.url(password="wrong"), "HOSTED_API_KEY": "k"}
    with GatewayProcess(_by_name(pods), tmp_path, env=env) as gateway:
        reply = _completion(gateway)
        # the operator's log has the words the client is not shown: which proxy refused
        failed = gateway.wait_log(lambda r: r.get("msg") == "upstream attempt failed")
    # as an HTTP proxy's 407: an upstream failure for the gateway, never the client's
    # credentials problem; the client is told the kind, not the proxy's address
    assert (reply.status_code, reply.headers["retry-after"]) == (503, "1"), reply.text
    assert "SocksError" in reply.text
    assert f"127.0.0.1:{microsocks.port}" not in reply.text
    assert "refused the credentials" in failed["error"]
    assert f"socks5h proxy 127.0.0.1:{microsocks.port}" in failed["error"]


# --- a misbehaving proxy ----------------------------------------------------------------
class FakeSocks:
    """Stands in for a misbehaving (or merely unusual) SOCKS5 proxy, which microsocks
    cannot be made to be: answers the greeting with `method`, credentials with
    `auth_status`, and CONNECT with `reply` (raw bytes, right or wrong); after a reply
    with code 0 it answers one HTTP request itself, as the upstream would."""

    def __init__(
        self, method: int = 0, reply: bytes = b"", auth_status: int = 0, close: bool = False
    ) -> None:
        self.method, self.reply, self.auth_status = method, reply, auth_status
        self.close = close  # after the reply, whatever it says
        self.greeting = self.auth = self.request = b""
        self.port = 0

    async def __aenter__(self) -> FakeSocks:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readexactly(2)
            self.greeting = head + await reader.readexactly(head[1])
            writer.write(bytes([5, self.method]))
            if self.method == 2:
                user = await reader.readexactly(2)
                name = await reader.readexactly(user[1])
                plen = await reader.readexactly(1)
                self.auth = user + name + plen + await reader.readexactly(plen[0])
                writer.write(bytes([1, self.auth_status]))
            head = await reader.readexactly(4)
            size = {1: 4, 4: 16}.get(head[3]) or (await reader.readexactly(1))[0]
            rest = await reader.readexactly(size + 2)
            self.request = head + (bytes([size]) if head[3] == 3 else b"") + rest
            writer.write(self.reply)
            if self.reply[1:2] == b"\x00" and not self.close:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await reader.read(1)  # until the client closes
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _through(proxy_url: str, host: str = "localhost") -> bytes:
    client = UpstreamClient(1, 2, proxies=ProxySettings(http=parse_proxy(proxy_url, "test")))
    try:
        response = await client.request(b"GET", parse_url(f"http://{host}:8080/"), b"", [])
        body = await response.read(100)
        response.release()
        return body
    finally:
        await client.close()


OK_IPV4 = bytes([5, 0, 0, 1, 10, 0, 0, 1, 0x1F, 0x90])


def test_the_handshake_bytes_are_rfc_1928_and_1929s() -> None:
    async def main() -> None:
        bound = b"proxy.example"  # a bound address given as a name: read and dropped
        reply = bytes([5, 0, 0, 3, len(bound)]) + bound + b"\x04\x38"
        async with FakeSocks(method=2, reply=reply) as fake:
            assert await _through(f"socks5h://u:pw@127.0.0.1:{fake.port}") == b"ok"
            assert fake.greeting == b"\x05\x02\x00\x02"  # no auth, user/password
            assert fake.auth == b"\x01\x01u\x02pw"
            assert fake.request == b"\x05\x01\x00\x03\x09localhost\x1f\x90"  # the name
        async with FakeSocks(reply=OK_IPV4) as fake:
            assert await _through(f"socks5://127.0.0.1:{fake.port}") == b"ok"
            assert fake.greeting == b"\x05\x01\x00"
            resolved = ipaddress.ip_address(LOCALHOST)  # resolved here: an address
            atyp = b"\x01" if resolved.version == 4 else b"\x04"
            assert fake.request == b"\x05\x01\x00" + atyp + resolved.packed + b"\x1f\x90"
        async with FakeSocks(reply=OK_IPV4) as fake:  # an IPv6 literal, as an address
            await _through(f"socks5h://127.0.0.1:{fake.port}", host="[::1]")
            assert fake.request == b"\x05\x01\x00\x04" + b"\x00" * 15 + b"\x01\x1f\x90"

    asyncio.run(main())


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (1, "general SOCKS server failure"),
        (2, "connection not allowed by ruleset"),
        (3, "network unreachable"),
        (4, "host unreachable"),
        (5, "connection refused"),
        (6, "TTL expired"),
        (7, "command not supported"),
        (8, "address type not supported"),
        (9, "unassigned reply code"),
    ],
)
def test_each_connect_reply_code_is_named(code: int, reason: str) -> None:
    async def main() -> None:
        async with FakeSocks(reply=bytes([5, code]) + OK_IPV4[2:]) as fake:
            label = f"socks5h proxy 127.0.0.1:{fake.port}"
            message = f"{label} could not connect to localhost:8080: {reason} \\({code:#04x}\\)"
            with pytest.raises(SocksError, match=message):
                await _through(f"socks5h://127.0.0.1:{fake.port}")

    asyncio.run(main())


@pytest.mark.parametrize(
    ("fake", "message"),
    [
        (FakeSocks(reply=OK_IPV4 + b"HTTP/1.1 200 OK\r\n"), "sent bytes after its CONNECT reply"),
        (FakeSocks(reply=bytes([5, 0, 0, 3, 255]) + b"a" * 300), "sent more than a SOCKS5 reply"),
        (FakeSocks(reply=bytes([5, 0, 0, 2, 0, 0])), "answered CONNECT with address type 2"),
        (FakeSocks(reply=bytes([4, 0, 0, 1]) + OK_IPV4[4:]), "answered CONNECT with version 4"),
        (
            FakeSocks(reply=OK_IPV4[:6], close=True),
            "closed the connection during the SOCKS5 handshake",
        ),
        (FakeSocks(method=2), "chose method 0x02, which was not offered"),
        (FakeSocks(method=0xFF), "accepts none of the offered authentication methods"),
        (FakeSocks(method=0x2F), "chose method 0x2f"),
    ],
)
def test_a_garbled_reply_is_the_proxys_error(fake: FakeSocks, message: str) -> None:
    async def main() -> None:
        async with fake:
            with pytest.raises(SocksError, match=f"socks5h proxy 127.0.0.1:{fake.port} {message}"):
                await _through(f"socks5h://127.0.0.1:{fake.port}")

    asyncio.run(main())


def test_a_proxy_answering_in_http_is_not_taken_for_socks() -> None:
    async def main() -> None:
        async def http(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            writer.close()

        server = await asyncio.start_server(http, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            with pytest.raises(SocksError, match="did not answer as a SOCKS5 proxy"):
                await _through(f"socks5://127.0.0.1:{port}")
        finally:
            server.close()

    asyncio.run(main())


def test_credentials_the_fake_refuses_and_a_silent_proxy_times_out_naming_it() -> None:
    async def main() -> None:
        async with FakeSocks(method=2, auth_status=1) as fake:
            with pytest.raises(SocksError, match="refused the credentials"):
                await _through(f"socks5h://u:p@127.0.0.1:{fake.port}")
        held: list[asyncio.StreamWriter] = []

        async def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            held.append(writer)  # accepts, answers nothing

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            with pytest.raises(UpstreamTimeout, match=f"via socks5h proxy 127.0.0.1:{port} in 1 s"):
                await _through(f"socks5h://127.0.0.1:{port}")
        finally:
            for writer in held:
                writer.close()
            server.close()

    asyncio.run(main())
