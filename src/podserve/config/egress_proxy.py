"""Which egress proxy an upstream is reached through, configured the way every other
client on a node is (the tunnels themselves are `podserve.gateway.upstream_proxy` and
`podserve.gateway.socks5`): `https_proxy` / `HTTPS_PROXY` for https upstreams,
`http_proxy` / `HTTP_PROXY` for http ones, `all_proxy` / `ALL_PROXY` for a scheme without
its own, `no_proxy` / `NO_PROXY` for the hosts that go direct (lower case first, as curl
and Go's net/http `ProxyFromEnvironment` read them). `ALL_PROXY` is curl's (its
documentation, "Proxy environment variables"), and Python's clients honour it too (httpx,
and requests through urllib's `getproxies`), so a node set up for them proxies the gateway
as well; Go's net/http does not read it.

Clusters that reach hosted APIs only through an egress proxy set these on the gateway's
Deployment, with the cluster's own names in NO_PROXY so pods stay direct. NO_PROXY
entries, as Go's httpproxy package reads them (golang.org/x/net/http/httpproxy):
`*` (everything), a domain that matches itself and its subdomains (`example.com`,
`.example.com`), an IP address, a CIDR block (`10.0.0.0/8`: pod and service IPs), each
optionally with `:port`. Kubernetes' own guidance puts `.svc`, `.cluster.local` and the
pod/service CIDRs there.

Through an HTTP proxy, https goes through a CONNECT tunnel (RFC 9110 §9.3.6), TLS end to
end with the upstream, so the proxy sees only the host; plain http is sent to the proxy
with the absolute URL as the request target (RFC 9112 §3.2.2). `user:password@` in the
proxy URL becomes `Proxy-Authorization: Basic` (RFC 7617).

The proxy itself is spoken to in plain HTTP (`http://`, port 80 by default) or over TLS
(`https://`, port 443 by default, as Go's `canonicalAddr` defaults them), which keeps the
`Proxy-Authorization` header and the CONNECT target off the wire in clear; an https
upstream through an https proxy is then TLS inside TLS. The proxy's certificate is checked
against the same CA store as the upstreams' (Go's transport does the same with its one
`TLSClientConfig`).

A SOCKS5 proxy (RFC 1928; port 1080 by default) tunnels both schemes: http and https
upstreams alike get a tunnel, and https runs TLS inside it, as through CONNECT. As curl
reads the schemes, `socks5://` has the gateway resolve the upstream's name and send the
proxy an address, `socks5h://` sends the name for the proxy to resolve (what a proxy that
alone can resolve external names needs). `user:password@` is RFC 1929's username/password
authentication, whose fields are at most 255 bytes each. SOCKS is spoken in clear: there
is no TLS to a SOCKS proxy, and `socks5s://` and the like are unknown schemes. A proxy URL
the client cannot use is refused when the gateway starts, not at the first request.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote, urlsplit

# The variables each scheme's own proxy is read from, lower case first; then, for a scheme
# none of them sets, ALL_PROXY_ENV.
PROXY_ENV = {"http": ("http_proxy", "HTTP_PROXY"), "https": ("https_proxy", "HTTPS_PROXY")}
ALL_PROXY_ENV = ("all_proxy", "ALL_PROXY")


def proxy_env_names(scheme: str) -> tuple[str, ...]:
    """Every variable that can set `scheme`'s proxy, in the order they are read."""
    return PROXY_ENV[scheme] + ALL_PROXY_ENV


_DEFAULT_PORT = {"http": 80, "https": 443, "socks5": 1080, "socks5h": 1080}
_SOCKS_FIELD_MAX = 255  # RFC 1929 §2: ULEN and PLEN are one byte each


@dataclass(frozen=True, slots=True)
class Proxy:
    host: str
    port: int
    authorization: bytes | None  # the Proxy-Authorization value (HTTP proxies)
    tls: bool = False  # an https:// proxy: TLS to the proxy itself
    socks: Literal["socks5", "socks5h"] | None = None  # a SOCKS5 proxy, and which reading
    credentials: tuple[bytes, bytes] | None = None  # SOCKS5 username and password

    @property
    def label(self) -> str:
        """How errors name it: `proxy host:port`, `https` marked, or `socks5 proxy
        host:port` (`socks5h`)."""
        if self.socks is not None:
            return f"{self.socks} proxy {self.host}:{self.port}"
        return f"proxy {'https://' if self.tls else ''}{self.host}:{self.port}"

    def header_lines(self) -> bytes:
        if self.authorization is None:
            return b""
        return b"proxy-authorization: " + self.authorization + b"\r\n"


def parse_proxy(value: str, source: str) -> Proxy:
    """`http[s]://[user:password@]host[:port]`, `socks5[h]://[user:password@]host[:port]`,
    or `host:port` (taken as http, as curl does)."""
    text = value.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    scheme = parts.scheme
    if scheme not in _DEFAULT_PORT:
        raise ValueError(
            f"{source}={_shown(value)!r}: only http://, https://, socks5:// and socks5h:// proxies "
            f"are supported, not {scheme}:// (TLS to the proxy is https://; SOCKS is spoken "
            "in clear)"
        )
    try:
        port = parts.port or _DEFAULT_PORT[scheme]
    except ValueError as exc:
        raise ValueError(f"{source}={_shown(value)!r}: {exc}") from None
    if not parts.hostname:
        raise ValueError(f"{source}={_shown(value)!r}: no proxy host")
    user = None if parts.username is None else unquote(parts.username)
    password = unquote(parts.password or "")
    if scheme in ("socks5", "socks5h"):
        return Proxy(
            parts.hostname,
            port,
            None,
            socks="socks5" if scheme == "socks5" else "socks5h",
            credentials=None if user is None else _socks_credentials(user, password, source),
        )
    authorization = None
    if user is not None:
        authorization = b"Basic " + base64.b64encode(f"{user}:{password}".encode())
    return Proxy(parts.hostname, port, authorization, tls=scheme == "https")


def _shown(value: str) -> str:
    """The proxy URL for an error message, its `user:password@` masked: the message goes
    to the gateway's log and stderr, where a password must not."""
    scheme, sep, rest = value.strip().rpartition("://")
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rsplit("@", 1)[1]
    return f"{scheme}{sep}{authority}{slash}{path}"


def _socks_credentials(user: str, password: str, source: str) -> tuple[bytes, bytes]:
    """RFC 1929 §2's fields, refused now if they do not fit: ULEN is 1 to 255, PLEN one
    byte (an empty password is let through, as curl and Go's x/net/proxy send it)."""
    pair = user.encode(), password.encode()
    if not 1 <= len(pair[0]) <= _SOCKS_FIELD_MAX or len(pair[1]) > _SOCKS_FIELD_MAX:
        # the value itself is not echoed: it holds the password
        raise ValueError(
            f"{source}: a SOCKS5 user name must be 1 to {_SOCKS_FIELD_MAX} bytes and a "
            f"password at most {_SOCKS_FIELD_MAX} (RFC 1929)"
        )
    return pair


@dataclass(frozen=True, slots=True)
class _Bypass:
    everything: bool
    domains: tuple[tuple[str, int | None], ...]  # (suffix without a leading dot, port)
    networks: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, int | None], ...]

    def matches(self, host: str, port: int) -> bool:
        if self.everything:
            return True
        host = host.lower().rstrip(".")
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            address = None
        if address is not None:
            return any(address in net and (p is None or p == port) for net, p in self.networks)
        return any(
            (host == d or host.endswith("." + d)) and (p is None or p == port)
            for d, p in self.domains
        )


def _parse_bypass(value: str) -> _Bypass:
    domains: list[tuple[str, int | None]] = []
    networks: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, int | None]] = []
    for raw in value.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return _Bypass(True, (), ())
        port: int | None = None
        try:  # a bare address or block (IPv6 has colons of its own)
            networks.append((ipaddress.ip_network(entry.strip("[]"), strict=False), None))
            continue
        except ValueError:
            pass
        host, sep, tail = entry.rpartition(":")
        if sep and tail.isdigit():
            entry, port = host, int(tail)
        try:
            networks.append((ipaddress.ip_network(entry.strip("[]"), strict=False), port))
        except ValueError:
            domains.append((entry.lstrip("*").lstrip(".").rstrip("."), port))
    return _Bypass(False, tuple(domains), tuple(networks))


class ProxySettings:
    """Which proxy, if any, an upstream origin goes through."""

    def __init__(
        self, http: Proxy | None = None, https: Proxy | None = None, no_proxy: str = ""
    ) -> None:
        self._by_scheme = {"http": http, "https": https}
        self._bypass = _parse_bypass(no_proxy)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ProxySettings:
        """From the process environment; ValueError names a variable it cannot use."""

        def pick(scheme: str) -> Proxy | None:
            for key in proxy_env_names(scheme):
                value = env.get(key, "").strip()
                if value:
                    return parse_proxy(value, key)
            return None

        no_proxy = env.get("no_proxy") or env.get("NO_PROXY") or ""
        return cls(pick("http"), pick("https"), no_proxy)

    @property
    def any(self) -> bool:
        return any(self._by_scheme.values())

    def for_origin(self, scheme: str, host: str, port: int) -> Proxy | None:
        proxy = self._by_scheme.get(scheme)
        if proxy is None or self._bypass.matches(host, port):
            return None
        return proxy


NO_PROXIES = ProxySettings()

_PLACEHOLDER = Proxy("egress-proxy", 3128, None)


def proxied_endpoints(
    schemes: Iterable[str], no_proxy: str, endpoints: Iterable[tuple[str, str]]
) -> Iterator[tuple[str, str]]:
    """The (pool, endpoint URL) pairs a gateway whose `schemes` go through a proxy would
    send to it with this NO_PROXY: checked before deploying (the Gateway spec, `lint`),
    since a proxy cannot reach cluster-internal names. Which proxy does not matter, only
    whether one applies. A URL with a bad port is the config's own error, not this one."""
    proxied = set(schemes)
    settings = ProxySettings(
        http=_PLACEHOLDER if "http" in proxied else None,
        https=_PLACEHOLDER if "https" in proxied else None,
        no_proxy=no_proxy,
    )
    for pool, endpoint in endpoints:
        url = urlsplit(endpoint)
        try:
            port = url.port or (443 if url.scheme == "https" else 80)
        except ValueError:
            continue
        if settings.for_origin(url.scheme, url.hostname or "", port) is not None:
            yield pool, endpoint
