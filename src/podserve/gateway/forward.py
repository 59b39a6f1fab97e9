"""Send a request upstream: targets in the router's order, retrying only before the first
response byte and only while the retry budget allows.

A retryable failure is a connection error or a 502/503/504 status: nothing has reached the
client yet, so the next target can take the request whole. Once response headers other
than those are back, the attempt is final (a stream cut in the middle is never replayed:
the client already holds part of it).

An upstream that answers 401 or 407 refused the *gateway's* credentials (a hosted API
key, an egress proxy's: tinyproxy 1.11 answers an absolute-form request with wrong
credentials with 401 and `WWW-Authenticate`, not 407), never the client's, which the
gateway has already checked. Passed on as it came, it told the client its own key was
bad (the OpenAI SDK raises `AuthenticationError` and does not retry). It is a failed
attempt instead: the next target is tried, and when none answers the client gets 502
naming the upstream that refused, and the operator a log line.

The client is `upstream_http` (keep-alive HTTP/1.1 on httptools): the client's CPU per
request is the gateway's overhead on the proxy's hot path, and it spends a quarter to a
third of aiohttp's (measured in that module's docstring), which spent a tenth of httpx's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from podserve.config.egress_proxy import NO_PROXIES, ProxySettings
from podserve.gateway.errors import GatewayError, NoUpstream, UpstreamFailed
from podserve.gateway.metrics import GatewayMetrics
from podserve.gateway.retry_budget import RetryBudget
from podserve.gateway.routing import Router, Target
from podserve.gateway.upstream_http import (
    Header,
    ResponseTooLarge,
    UpstreamClient,
    UpstreamError,
    UpstreamResponse,
    Url,
    parse_url,
)

log = logging.getLogger("podserve.gateway")
RETRYABLE_STATUS = frozenset({502, 503, 504})
CREDENTIALS_REFUSED = frozenset({401, 407})
_JSON = (b"content-type", b"application/json")


@dataclass(slots=True)
class Attempted:
    target: Target
    response: UpstreamResponse
    upstream_s: float  # time spent waiting for the upstream's headers
    attempts: int


# TimeoutError covers the client's own timeouts; OSError a refused connection or TLS.
UPSTREAM_ERRORS = (UpstreamError, TimeoutError, OSError)


def upstream_failed(exc: BaseException) -> UpstreamFailed:
    """The 502 for an upstream that answered but whose body could not be had."""
    if isinstance(exc, ResponseTooLarge):
        return UpstreamFailed(f"upstream failed: response over maxResponseBytes ({exc})")
    return UpstreamFailed(f"upstream failed: {exc or type(exc).__name__}")


class Forwarder:
    def __init__(
        self,
        router: Router,
        budget: RetryBudget,
        metrics: GatewayMetrics,
        hosted_keys: Mapping[str, str],
        connect_timeout_s: float,
        read_timeout_s: float,
        proxies: ProxySettings = NO_PROXIES,
    ) -> None:
        self._router = router
        self._budget = budget
        self._metrics = metrics
        # No pool limit: admission already bounded the requests in flight. No cookies
        # are kept: one client carries every tenant's requests, and a stored Set-Cookie
        # (hosted APIs set them: OpenAI's, behind Cloudflare, sends `__cf_bm`) would ride
        # every later request to that host, whoever made it (tests/gateway/test_cookies.py).
        self._client = UpstreamClient(connect_timeout_s, read_timeout_s, proxies=proxies)
        # Parsed upstream URLs. The paths are the routes' and the configured models'
        # (checked before sending): few.
        self._urls: dict[str, Url] = {}
        self._auth = {
            name: (b"authorization", f"Bearer {key}".encode("latin-1"))
            for name, key in hosted_keys.items()
            if key
        }

    async def close(self) -> None:
        await self._client.close()

    def _url(self, url: str) -> Url:
        found = self._urls.get(url)
        if found is None:
            if len(self._urls) > 4096:
                self._urls.clear()
            found = self._urls[url] = parse_url(url)
        return found

    def _request(
        self, target: Target, path: str, rid: str, body: bool, passed: Sequence[Header]
    ) -> tuple[Url, list[Header]]:
        headers = [(b"x-request-id", rid.encode("ascii")), *passed]
        if body and not any(name == b"content-type" for name, _ in passed):
            headers.append(_JSON)
        if target.hosted:
            # A hosted base URL already ends in /v1.
            url = target.base_url + path.removeprefix("/v1")
            auth = self._auth.get(target.upstream)
            if auth is not None:
                headers.append(auth)
        else:
            url = target.base_url + path
        return self._url(url), headers

    async def send(
        self,
        model: str,
        path: str,
        body: bytes,
        rid: str,
        method: str = "POST",
        renamed: Callable[[str], bytes] | None = None,
        passed: Sequence[Header] = (),
    ) -> Attempted:
        """`renamed(name)`: the body with `model` as `name`, for a fallback that knows the
        model by another name (`fallbacks[].upstreamModels`); made once per name.
        `passed`: the client's headers that describe the body (OIP's binary extension).
        A hosted fallback is an OpenAI-compatible API (its base URL ends in /v1): it is a
        target for the /v1 routes only, never for OIP v2, which goes to pools alone."""
        self._budget.on_request()
        bodies: dict[str, bytes] = {}
        verb = method.encode("ascii")
        hosted = path.startswith("/v1/")
        targets = self._router.plan(model, time.monotonic(), hosted)
        if not targets:
            where = "upstream" if hosted else "pool endpoint (OIP v2 goes to pools only)"
            raise NoUpstream(f"no {where} can serve '{model}' now", retry_after_s=1)
        last: Attempted | None = None
        error = "no attempt made"
        refused: str | None = None
        sent = time.perf_counter()
        for index, target in enumerate(targets):
            if index > 0:
                if not self._budget.try_retry():
                    break
                self._metrics.retry(target.upstream).inc()
            started = time.perf_counter()
            self._router.on_start(target, time.monotonic())
            url, headers = self._request(target, path, rid, method == "POST", passed)
            payload = body
            name = target.model_name
            if name is not None and renamed is not None:
                found = bodies.get(name)
                payload = bodies[name] = renamed(name) if found is None else found
            try:
                response = await self._client.request(verb, url, payload, headers)
            except asyncio.CancelledError:
                # Its client left (exchange.unless_gone): no failure of the endpoint's,
                # but its in-flight count and a half-open breaker's probe must end.
                self._router.on_finish(target, True, time.monotonic())
                raise
            except UPSTREAM_ERRORS as exc:
                self._router.on_finish(target, False, time.monotonic())
                error = f"{target.upstream}: {type(exc).__name__}"
                # The client sees the error's kind only (no internal addresses); the
                # operator's log has its words: which proxy refused, which host failed.
                log.warning(
                    "upstream attempt failed",
                    extra={"upstream": target.upstream, "error": str(exc) or error},
                )
                continue
            waited = time.perf_counter() - started
            self._metrics.upstream(target.upstream).observe(waited)
            if response.status in CREDENTIALS_REFUSED:
                response.close()
                self._router.on_finish(target, False, time.monotonic())
                refused = f"upstream '{target.upstream}' refused the gateway's credentials"
                log.warning(
                    "upstream refused the gateway's credentials",
                    extra={"upstream": target.upstream, "status": response.status},
                )
                continue
            if response.status in RETRYABLE_STATUS:
                if last is not None:
                    last.response.close()
                last = Attempted(target, response, waited, index + 1)
                self._router.on_finish(target, False, time.monotonic())
                continue
            if last is not None:
                last.response.close()
            return Attempted(target, response, waited, index + 1)
        if last is not None:
            return last  # every target overloaded: pass the last 503 on, as it came
        failure: GatewayError = (
            UpstreamFailed(f"{refused} (ask the gateway's operator)")
            if refused is not None
            else NoUpstream(f"no upstream answered for '{model}' ({error})", retry_after_s=1)
        )
        failure.upstream_s = time.perf_counter() - sent
        raise failure

    def finished(self, attempt: Attempted, ok: bool) -> None:
        """The response is done (success or not): release the endpoint's in-flight slot."""
        if attempt.response.status in RETRYABLE_STATUS:
            return  # already accounted when the attempt was judged a failure
        self._router.on_finish(attempt.target, ok, time.monotonic())
