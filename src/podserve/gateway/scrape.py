"""Pod load from `/metrics` and `/ready`, polled in the background.

Only four series are read, so the exposition is scanned line by line for them rather than
parsed whole (a podserve pod exports hundreds of histogram lines; the endpoint picker polls
every 50 ms, and so may we). Names: vLLM's `vllm:num_requests_waiting`,
`vllm:num_requests_running` and `vllm:kv_cache_usage_perc` (a 0-1 fraction despite the
name, vllm/v1/metrics/loggers.py), and podserve's `podserve_queue_depth` (batched models'
queue, src/podserve/obs/metrics.py). Series summed over a pod's models; a model's waiting
is the larger of its two waiting series (podserve may report the same requests in both).
"""

from __future__ import annotations

import asyncio
import contextlib
import math

from podserve.config.egress_proxy import NO_PROXIES, ProxySettings
from podserve.gateway.routing import EndpointLoad, Router
from podserve.gateway.upstream_http import (
    ResponseTooLarge,
    UpstreamClient,
    UpstreamError,
    Url,
    parse_url,
)

_WAITING = ("vllm:num_requests_waiting", "podserve_queue_depth")
_RUNNING = ("vllm:num_requests_running",)
_KV = ("vllm:kv_cache_usage_perc",)
_WANTED = frozenset(_WAITING + _RUNNING + _KV)
MISSES_BEFORE_DOWN = 3
# A podserve pod's exposition is about 100 KB with a few models; a pod answering more than
# this is not read whole every 50 ms (it counts as a pod that did not answer).
MAX_METRICS_BYTES = 8 << 20


def parse_load(text: str, ready: bool) -> EndpointLoad:
    # Per model, waiting is the larger of vLLM's waiting and podserve's queue depth: a
    # generative model may report both for the same requests, which must not count twice.
    waiting_by: dict[str, float] = {}
    depth_by: dict[str, float] = {}
    running = kv = 0.0
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        ends = [i for i in (line.find("{"), line.find(" ")) if i >= 0]
        if not ends:
            continue
        cut = min(ends)
        name = line[:cut]
        if name not in _WANTED:
            continue
        # Label values may hold spaces: the value follows the closing brace.
        rest = line[line.rfind("}") + 1 :] if line[cut] == "{" else line[cut:]
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isnan(value):
            continue
        if name == _WAITING[0]:
            model = _model_of(line)
            waiting_by[model] = waiting_by.get(model, 0.0) + value
        elif name == _WAITING[1]:
            model = _model_of(line)
            depth_by[model] = depth_by.get(model, 0.0) + value
        elif name in _RUNNING:
            running += value
        else:
            kv = max(kv, value)
    waiting = sum(
        max(waiting_by.get(m, 0.0), depth_by.get(m, 0.0)) for m in waiting_by.keys() | depth_by
    )
    return EndpointLoad(ready=ready, waiting=waiting, running=running, kv_usage=kv)


def _model_of(line: str) -> str:
    """The `model_name` (vLLM) or `model` (podserve) label's value, or ""."""
    for label in ('model_name="', 'model="'):
        start = line.find(label)
        if start >= 0:
            start += len(label)
            return line[start : line.find('"', start)]
    return ""


async def _get(client: UpstreamClient, url: Url) -> tuple[int, str]:
    response = await client.request(b"GET", url, b"", ())
    try:
        return response.status, (await response.read(MAX_METRICS_BYTES)).decode()
    finally:
        response.release()  # closed instead when the body was not read whole


def probe_urls(endpoint: str) -> tuple[Url, Url]:
    """An endpoint's `/ready` and `/metrics`, parsed once (they are polled every 50 ms)."""
    return parse_url(f"{endpoint}/ready"), parse_url(f"{endpoint}/metrics")


async def scrape_once(
    client: UpstreamClient, urls: tuple[Url, Url], timeout_s: float = 1.0
) -> EndpointLoad | None:
    """One pod's load, or None when it did not answer (refused, timed out)."""
    try:
        async with asyncio.timeout(timeout_s):
            (ready, _), (status, text) = await asyncio.gather(
                _get(client, urls[0]), _get(client, urls[1])
            )
    except (TimeoutError, UpstreamError, OSError, UnicodeDecodeError, ResponseTooLarge):
        return None
    if status != 200:
        return EndpointLoad(ready=False)
    return parse_load(text, ready == 200)


class Scraper:
    """Refreshes the router's view of every pool endpoint each interval."""

    def __init__(
        self,
        router: Router,
        interval_s: float,
        timeout_s: float = 1.0,
        proxies: ProxySettings = NO_PROXIES,
    ) -> None:
        self._router = router
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._client = UpstreamClient(timeout_s, timeout_s, proxies=proxies)
        # The pool endpoints are the config's, fixed for the process: parsed once.
        self._urls = {ep: probe_urls(ep) for ep in router.endpoints()}
        self._misses: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0

    async def refresh(self) -> None:
        endpoints = self._urls
        client, timeout_s = self._client, self._timeout_s
        loads = await asyncio.gather(
            *(scrape_once(client, urls, timeout_s) for urls in endpoints.values())
        )
        for endpoint, load in zip(endpoints, loads, strict=True):
            if load is not None:  # an answer, ready or not, is believed at once
                self._misses[endpoint] = 0
                self._router.update_load(endpoint, load)
                continue
            # No answer: like a readiness probe's failureThreshold (default 3), one slow
            # scrape of a busy pod does not take it out of rotation.
            self._misses[endpoint] = self._misses.get(endpoint, 0) + 1
            if self._misses[endpoint] >= MISSES_BEFORE_DOWN or self.rounds == 0:
                self._router.update_load(endpoint, EndpointLoad(ready=False))
        self.rounds += 1

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)  # a poll period, not synchronisation
            await self.refresh()

    async def start(self) -> None:
        await self.refresh()  # serve from the first request with a real view
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._client.close()
