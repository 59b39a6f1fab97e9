"""Egress through a proxy: the environment's settings, and requests through a real
tinyproxy (Debian's `tinyproxy`, installed by .ci/run) to loopback upstreams, https over
CONNECT and plain http in absolute form, on asyncio's loop and on uvloop, with the proxy
spoken to in plain HTTP and over TLS (Debian's `stunnel4` in front of the same tinyproxy);
then real gateway processes reaching their pod through either."""

from __future__ import annotations

import asyncio
import base64
import shutil
import ssl
import subprocess
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from podserve.config.egress_proxy import ProxySettings, parse_proxy
from podserve.gateway.upstream_http import UpstreamClient, UpstreamError, UpstreamTimeout, parse_url
from tests.gateway.conftest import Pods, base_config
from tests.gateway.support import GatewayProcess, create_key
from tests.gateway.test_upstream_http import Scripted, _json
from tests.support.ports import free_port, listening
from tests.support.server import wait_until
from tests.support.tls import self_signed

USER, PASSWORD = "gw", "s3cret-pass"  # tinyproxy takes letters, digits, "-" and "_"


# --- the environment ------------------------------------------------------------------
def test_the_environment_picks_a_proxy_per_scheme_lower_case_first() -> None:
    settings = ProxySettings.from_env(
        {
            "https_proxy": "http://low:3128",
            "HTTPS_PROXY": "http://up:3128",
            "HTTP_PROXY": "plain:8080",  # no scheme: http, as curl reads it
        }
    )
    https = settings.for_origin("https", "api.example.com", 443)
    http = settings.for_origin("http", "api.example.com", 80)
    assert https is not None
    assert (https.host, https.port) == ("low", 3128)
    assert http is not None
    assert (http.host, http.port) == ("plain", 8080)
    assert not ProxySettings.from_env({}).any


def test_all_proxy_serves_the_schemes_without_a_variable_of_their_own() -> None:
    """curl's ALL_PROXY (lower case first, like the others): a scheme's own variable wins."""
    settings = ProxySettings.from_env(
        {"https_proxy": "http://own:3128", "all_proxy": "socks5h://low:1080", "ALL_PROXY": "up:1"}
    )
    https = settings.for_origin("https", "api.example.com", 443)
    http = settings.for_origin("http", "api.example.com", 80)
    assert https is not None
    assert (https.host, https.socks) == ("own", None)
    assert http is not None
    assert (http.host, http.port, http.socks) == ("low", 1080, "socks5h")
    with pytest.raises(ValueError, match="ALL_PROXY"):
        ProxySettings.from_env({"ALL_PROXY": "socks4://p:1080"})


@pytest.mark.parametrize(
    ("host", "port", "direct"),
    [
        ("pod-0.chat.svc.cluster.local", 8000, True),  # .cluster.local
        ("cluster.local", 8000, True),  # the domain itself
        ("api.openai.com", 443, False),
        ("10.12.3.4", 8000, True),  # in 10.0.0.0/8
        ("192.168.1.9", 8000, False),
        ("fd00::5", 8000, True),  # in fd00::/8
        ("internal.example.com", 8443, True),  # example.com:8443
        ("internal.example.com", 443, False),  # another port
        ("notexample.com", 8443, False),  # a suffix, not a subdomain
        ("Registry.Corp.", 443, True),  # case and a trailing dot
    ],
)
def test_no_proxy_entries_as_go_reads_them(host: str, port: int, direct: bool) -> None:
    settings = ProxySettings(
        https=parse_proxy("http://proxy:3128", "test"),
        http=parse_proxy("http://proxy:3128", "test"),
        no_proxy=".cluster.local, 10.0.0.0/8,fd00::/8, example.com:8443 ,*.corp",
    )
    scheme = "https" if port in (443, 8443) else "http"
    assert (settings.for_origin(scheme, host, port) is None) is direct


def test_credentials_in_the_proxy_url_are_unescaped_into_basic_auth() -> None:
    proxy = parse_proxy("http://user%40corp:p%3Ass%2Fw@proxy.corp:3128", "test")
    assert proxy.header_lines() == (
        b"proxy-authorization: Basic " + base64.b64encode(b"user@corp:p:ss/w") + b"\r\n"
    )
    assert parse_proxy("proxy.corp:3128", "test").header_lines() == b""


def test_no_proxy_star_sends_everything_direct() -> None:
    settings = ProxySettings.from_env({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"})
    assert settings.for_origin("https", "api.openai.com", 443) is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("socks4://proxy:1080", "only http://, https://, socks5:// and socks5h:// proxies"),
        ("socks5s://proxy:1080", "not socks5s://"),  # no TLS to a SOCKS proxy
        ("socks5://proxy:99999", "https_proxy="),
        ("socks5h://" + "u" * 256 + ":pw@proxy", "1 to 255 bytes"),  # RFC 1929's fields
        ("socks5://user:" + "p" * 256 + "@proxy", "password at most 255"),
        ("socks5h://:pw@proxy", "user name must be 1 to 255"),
        ("http://proxy:99999", "https_proxy="),
        ("http://:3128", "no proxy host"),
    ],
)
def test_a_proxy_the_client_cannot_use_is_refused_by_name(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProxySettings.from_env({"https_proxy": value})


@pytest.mark.parametrize(
    "value", ["socks4://gw:hunter2@proxy:1080", "http://gw:hunter2@proxy:99999", "gw:hunter2@:1"]
)
def test_a_refused_proxy_url_is_named_without_its_password(value: str) -> None:
    with pytest.raises(ValueError, match=r"\*\*\*@") as refused:
        ProxySettings.from_env({"https_proxy": value})
    assert "hunter2" not in str(refused.value)


def test_the_gateway_refuses_to_start_with_an_unusable_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from podserve.cli.main import main

    config = tmp_path / "gateway.yaml"
    config.write_text("store: {kind: sqlite, path: g.db}\n")
    monkeypatch.setenv("HTTPS_PROXY", "socks4://p:1080")
    monkeypatch.delenv("https_proxy", raising=False)
    assert main(["gateway", "--config", str(config), "--port", "0"]) == 2
    assert "HTTPS_PROXY='socks4://p:1080': only http://, https://" in capsys.readouterr().err


def test_an_https_proxy_is_spoken_to_over_tls_on_port_443_by_default() -> None:
    proxy = parse_proxy("https://proxy.corp", "test")
    assert (proxy.host, proxy.port, proxy.tls) == ("proxy.corp", 443, True)
    assert proxy.label == "proxy https://proxy.corp:443"
    plain = parse_proxy("http://proxy.corp", "test")
    assert (plain.port, plain.tls, plain.label) == (80, False, "proxy proxy.corp:80")


# --- a real proxy -----------------------------------------------------------------------
@dataclass
class Tinyproxy:
    port: int
    log: Path

    def url(self, credentials: bool = True) -> str:
        userinfo = f"{USER}:{PASSWORD}@" if credentials else ""
        return f"http://{userinfo}127.0.0.1:{self.port}"

    def requests(self) -> list[str]:
        """The request lines tinyproxy logged ("Request (file descriptor N): LINE")."""
        return [
            line.split("): ", 1)[1]
            for line in self.log.read_text().splitlines()
            if "Request (file descriptor" in line
        ]


@pytest.fixture(scope="module")
def tinyproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tinyproxy]:
    binary = shutil.which("tinyproxy")
    if binary is None:
        pytest.skip("tinyproxy is not installed (Debian: apt-get install tinyproxy)")
    work = tmp_path_factory.mktemp("tinyproxy")
    port = free_port()
    config = work / "tinyproxy.conf"
    # No ConnectPort line: CONNECT to any port (the test servers' are ephemeral).
    config.write_text(
        f"Port {port}\nListen 127.0.0.1\nTimeout 60\nMaxClients 64\nAllow 127.0.0.1\n"
        f"LogLevel Connect\nBasicAuth {USER} {PASSWORD}\n"
    )
    log = work / "tinyproxy.log"
    with log.open("w") as out:
        proc = subprocess.Popen([binary, "-d", "-c", str(config)], stdout=out, stderr=out)
    try:
        wait_until(lambda: proc.poll() is not None or listening(port), 10, "tinyproxy listening")
        assert proc.poll() is None, log.read_text()
        yield Tinyproxy(port, log)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def tls(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(the server's context, a client context that trusts it)."""
    cert, key = self_signed(tmp_path)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=str(cert))


Trust = Callable[[ssl.SSLContext], ssl.SSLContext]


@pytest.fixture(params=["http-proxy", "https-proxy"])
def egress(request: pytest.FixtureRequest, tinyproxy: Tinyproxy) -> tuple[str, Trust]:
    """A proxy URL, and how a client's context comes to trust it: tinyproxy itself, or
    stunnel's TLS in front of it (`tls_proxy`: an https upstream is then TLS inside TLS)."""
    if request.param == "http-proxy":
        return tinyproxy.url(), lambda context: context
    tls_proxy: TlsProxy = request.getfixturevalue("tls_proxy")
    return tls_proxy.url(), tls_proxy.trusted_by


def test_https_goes_through_a_connect_tunnel_and_the_tunnel_is_reused(
    run: Callable[[Coroutine[Any, Any, Any]], Any],
    tinyproxy: Tinyproxy,
    egress: tuple[str, Trust],
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server_tls, client_tls = tls
    proxy_url, trust = egress

    async def main() -> None:
        async with Scripted(_json, tls=server_tls) as server:
            proxies = ProxySettings(https=parse_proxy(proxy_url, "test"))
            client = UpstreamClient(2, 5, ssl_context=trust(client_tls), proxies=proxies)
            try:
                for body in (b"x" * 10, b"y" * 20):
                    response = await client.request(
                        b"POST", server.url(), body, [(b"content-type", b"application/json")]
                    )
                    assert response.status == 200
                    assert await response.read(1 << 20) == b'{"echo":%d}' % len(body)
                    response.release()
                # TLS end to end: the upstream got origin-form targets, on one connection
                assert [head.split(b" ")[1] for head, _ in server.requests] == [b"/v1/x"] * 2
                assert server.connections == 1
                assert client.connections_made == 1
            finally:
                await client.close()
            assert f"CONNECT 127.0.0.1:{server.port} HTTP/1.1" in tinyproxy.requests()

    run(main())


def test_http_is_sent_to_the_proxy_with_the_absolute_url(
    run: Callable[[Coroutine[Any, Any, Any]], Any],
    tinyproxy: Tinyproxy,
    egress: tuple[str, Trust],
) -> None:
    proxy_url, trust = egress

    async def main() -> None:
        async with Scripted(_json) as server:
            proxies = ProxySettings(http=parse_proxy(proxy_url, "test"))
            context = trust(ssl.create_default_context())
            client = UpstreamClient(2, 5, ssl_context=context, proxies=proxies)
            try:
                response = await client.request(b"POST", server.url("/v2/m/infer?x=1"), b"{}", [])
                assert response.status == 200
                assert await response.read(1 << 20) == b'{"echo":2}'
                response.release()
            finally:
                await client.close()
            assert len(server.requests) == 1
            target = f"http://127.0.0.1:{server.port}/v2/m/infer?x=1"
            assert f"POST {target} HTTP/1.1" in tinyproxy.requests()

    run(main())


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_proxy_asking_for_credentials_is_an_upstream_error_not_a_407_for_the_client(
    run: Callable[[Coroutine[Any, Any, Any]], Any],
    tinyproxy: Tinyproxy,
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
    scheme: str,
) -> None:
    server_tls, client_tls = tls

    async def main() -> None:
        async with Scripted(_json, tls=server_tls if scheme == "https" else None) as server:
            # (tinyproxy answers wrong credentials with 401, and none with 407)
            proxy = parse_proxy(tinyproxy.url(credentials=False), "test")
            proxies = ProxySettings(http=proxy, https=proxy)
            client = UpstreamClient(2, 5, ssl_context=client_tls, proxies=proxies)
            try:
                with pytest.raises(UpstreamError, match="407"):
                    await client.request(b"POST", server.url(), b"{}", [])
            finally:
                await client.close()
            assert server.requests == []

    run(main())


def test_no_proxy_hosts_go_direct(run: Callable[[Coroutine[Any, Any, Any]], Any]) -> None:
    closed = free_port()  # nothing listens: a request sent to the "proxy" fails

    async def main() -> None:
        async with Scripted(_json) as server:
            proxied = UpstreamClient(
                1, 5, proxies=ProxySettings.from_env({"http_proxy": f"127.0.0.1:{closed}"})
            )
            direct = UpstreamClient(
                1,
                5,
                proxies=ProxySettings.from_env(
                    {"http_proxy": f"127.0.0.1:{closed}", "no_proxy": "localhost,127.0.0.0/8"}
                ),
            )
            try:
                with pytest.raises(OSError, match=r"refused|Connect call failed"):
                    await proxied.request(b"GET", server.url(), b"", [])
                response = await direct.request(b"GET", server.url(), b"", [])
                assert response.status == 200
                response.release()
            finally:
                await proxied.close()
                await direct.close()

    run(main())


def _complete(gateway: GatewayProcess, key: str) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/completions",
        json={"model": "tiny-lm", "prompt": "hi", "max_tokens": 2},
        headers={"authorization": f"Bearer {key}"},
        timeout=60,
    )


@pytest.mark.parametrize("kind", ["http-proxy", "https-proxy"])
def test_a_gateway_reaches_its_pod_through_the_environments_proxy(
    pods: Pods, tinyproxy: Tinyproxy, tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    before = len(tinyproxy.requests())
    env = {"http_proxy": tinyproxy.url(), "HOSTED_API_KEY": "k"}
    if kind == "https-proxy":
        tls_proxy: TlsProxy = request.getfixturevalue("tls_proxy")
        # OpenSSL's default verify paths honour SSL_CERT_FILE: the proxy's CA, as a
        # cluster would mount its own.
        env |= {"http_proxy": tls_proxy.url(), "SSL_CERT_FILE": str(tls_proxy.cert)}
    with GatewayProcess(base_config(pods), tmp_path, env=env) as gateway:
        key = create_key(gateway.config_path)
        reply = _complete(gateway, key)
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 2
    lines = tinyproxy.requests()[before:]
    assert f"POST {pods.a.url}/v1/completions HTTP/1.1" in lines
    # the scraper's polls take the same way
    assert f"GET {pods.a.url}/ready HTTP/1.1" in lines


def test_a_proxy_refusing_the_gateways_credentials_is_a_502_not_the_clients_401(
    pods: Pods, tinyproxy: Tinyproxy, tmp_path: Path
) -> None:
    """tinyproxy answers an absolute-form request with wrong credentials with 401 and
    `WWW-Authenticate`, as an upstream would: passed on, it told the client its own
    (good) key was refused."""
    wrong = tinyproxy.url().replace(f":{PASSWORD}@", ":not-the-password@")
    env = {"http_proxy": wrong, "HOSTED_API_KEY": "k"}
    with GatewayProcess(base_config(pods), tmp_path, env=env) as gateway:
        key = create_key(gateway.config_path)
        reply = _complete(gateway, key)
    assert reply.status_code == 502, reply.text
    assert "refused the gateway's credentials" in reply.json()["error"]["message"]


def test_a_proxy_that_never_answers_connect_is_a_connect_timeout_naming_it(
    run: Callable[[Coroutine[Any, Any, Any]], Any],
) -> None:
    async def main() -> None:
        held: list[asyncio.StreamWriter] = []

        async def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            held.append(writer)  # accepts, reads nothing, answers nothing

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = UpstreamClient(
            0.3, 5, proxies=ProxySettings.from_env({"https_proxy": f"127.0.0.1:{port}"})
        )
        try:
            with pytest.raises(UpstreamTimeout, match=f"via proxy 127.0.0.1:{port} in 0.3 s"):
                await client.request(b"GET", parse_url("https://api.example.com/v1/x"), b"", [])
        finally:
            await client.close()
            for writer in held:
                writer.close()
            server.close()

    run(main())


# --- an https:// proxy: stunnel (Debian's stunnel4) terminating TLS in front of tinyproxy --
@dataclass
class TlsProxy:
    port: int
    cert: Path  # the proxy's certificate (its own CA)

    def url(self) -> str:
        return f"https://{USER}:{PASSWORD}@127.0.0.1:{self.port}"

    def trusted_by(self, context: ssl.SSLContext) -> ssl.SSLContext:
        context.load_verify_locations(cafile=str(self.cert))
        return context


@pytest.fixture(scope="module")
def tls_proxy(tinyproxy: Tinyproxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsProxy]:
    binary = shutil.which("stunnel4") or shutil.which("stunnel")
    if binary is None:
        pytest.skip("stunnel is not installed (Debian: apt-get install stunnel4)")
    work = tmp_path_factory.mktemp("stunnel")
    cert, key = self_signed(work, common_name="podserve test proxy")
    port = free_port()
    config = work / "stunnel.conf"
    config.write_text(
        f"foreground = yes\npid =\n[proxy]\naccept = 127.0.0.1:{port}\n"
        f"connect = 127.0.0.1:{tinyproxy.port}\ncert = {cert}\nkey = {key}\n"
    )
    log = work / "stunnel.log"
    with log.open("w") as out:
        proc = subprocess.Popen([binary, str(config)], stdout=out, stderr=out)
    try:
        wait_until(lambda: proc.poll() is not None or listening(port), 10, "stunnel listening")
        assert proc.poll() is None, log.read_text()
        yield TlsProxy(port, cert)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_an_https_proxy_with_an_untrusted_certificate_fails_naming_the_proxy(
    run: Callable[[Coroutine[Any, Any, Any]], Any],
    tls_proxy: TlsProxy,
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
    scheme: str,
) -> None:
    server_tls, client_tls = tls  # client_tls trusts the upstream, not the proxy

    async def main() -> None:
        async with Scripted(_json, tls=server_tls if scheme == "https" else None) as server:
            proxy = parse_proxy(tls_proxy.url(), "test")
            client = UpstreamClient(
                2, 5, ssl_context=client_tls, proxies=ProxySettings(http=proxy, https=proxy)
            )
            try:
                label = f"TLS with proxy https://127.0.0.1:{tls_proxy.port} failed"
                with pytest.raises(UpstreamError, match=label):
                    await client.request(b"GET", server.url(), b"", [])
            finally:
                await client.close()
            assert server.requests == []

    run(main())
