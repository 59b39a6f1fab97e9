"""Send every case to the endpoint with bounded concurrency and judge the answers.

The HTTP client sits behind `Transport` (one method), so tests swap in a fake one; the
real one is httpx. A request that fails (connection, timeout, non-200) fails its case with
the reason; it never stops the run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from podserve.core.errors import InvalidInput
from podserve.evaluation.checks import apply
from podserve.evaluation.endpoints import (
    Unselectable,
    model_path,
    request_of,
    select,
    uses_row_form,
)
from podserve.evaluation.results import CaseResult, RunResult
from podserve.evaluation.suite import Case, Suite

_BODY_CHARS = 300


@dataclass(frozen=True, slots=True)
class HttpReply:
    status: int
    body: bytes


class TransportError(Exception):
    """No HTTP response. `unreachable`: the connection itself could not be made."""

    def __init__(self, message: str, *, unreachable: bool) -> None:
        super().__init__(message)
        self.unreachable = unreachable


class Transport(Protocol):
    async def request(self, method: str, path: str, body: bytes | None = None) -> HttpReply: ...


class HttpxTransport:
    """The real transport: one pooled httpx client for the run."""

    def __init__(
        self, base_url: str, *, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> None:
        import httpx

        self._httpx = httpx
        self._timeout_s = timeout_s
        self._client = httpx.AsyncClient(
            base_url=base_url,
            timeout=timeout_s,
            headers={"content-type": "application/json", **(headers or {})},
        )

    async def request(self, method: str, path: str, body: bytes | None = None) -> HttpReply:
        httpx = self._httpx
        try:
            response = await self._client.request(method, path, content=body)
        except httpx.ConnectError as exc:
            raise TransportError(f"cannot connect: {exc}", unreachable=True) from None
        except httpx.TimeoutException:
            raise TransportError(
                f"no response within {self._timeout_s:g}s", unreachable=False
            ) from None
        except httpx.HTTPError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}", unreachable=False) from None
        return HttpReply(response.status_code, response.content)

    async def aclose(self) -> None:
        await self._client.aclose()


async def _datatypes(transport: Transport, case: Case) -> dict[str, str]:
    """Input datatypes from the model's metadata; empty when it cannot be read (the row
    form then infers them, and a wrong guess shows up as the case's failure)."""
    try:
        reply = await transport.request("GET", model_path(case))
        document = orjson.loads(reply.body) if reply.status == 200 else {}
    except (TransportError, orjson.JSONDecodeError):
        return {}
    inputs = document.get("inputs") if isinstance(document, dict) else None
    return {
        str(i["name"]): str(i["datatype"])
        for i in inputs or []
        if isinstance(i, dict) and "name" in i and "datatype" in i
    }


def _judge(case: Case, document: Any) -> tuple[str, ...]:
    reasons = []
    for number, check in enumerate(case.expect, start=1):
        label = f"check {number} ({check.kind}{f' {check.output}' if check.output else ''})"
        try:
            value = select(case.endpoint, document, check.output)
        except Unselectable as exc:
            reasons.append(f"{label}: {exc}")
            continue
        verdict = apply(check, value)
        if not verdict.passed:
            reasons.append(f"{label}: {verdict.reason}")
    return tuple(reasons)


def _failed(case: Case, reason: str, **fields: Any) -> CaseResult:
    return CaseResult(case.id, tuple(case.tags), False, (reason,), **fields)


async def run_case(
    case: Case,
    transport: Transport,
    datatypes: Mapping[str, str],
    clock: Callable[[], float] = time.monotonic,
) -> CaseResult:
    try:
        path, body = request_of(case, datatypes)
    except InvalidInput as exc:
        return _failed(case, f"invalid case: {exc.message}", status=None)
    start = clock()
    try:
        reply = await transport.request("POST", path, orjson.dumps(body))
    except TransportError as exc:
        return _failed(
            case,
            f"request failed: {exc}",
            latency_ms=(clock() - start) * 1000,
            reachable=not exc.unreachable,
        )
    latency_ms = (clock() - start) * 1000
    if reply.status != 200:
        text = reply.body[:_BODY_CHARS].decode("utf-8", "replace")
        return _failed(
            case, f"HTTP {reply.status}: {text}", status=reply.status, latency_ms=latency_ms
        )
    try:
        document = orjson.loads(reply.body)
    except orjson.JSONDecodeError:
        return _failed(case, "response is not JSON", status=reply.status, latency_ms=latency_ms)
    reasons = _judge(case, document)
    return CaseResult(case.id, tuple(case.tags), not reasons, reasons, reply.status, latency_ms)


async def run_suite(
    suite: Suite,
    transport: Transport,
    *,
    url: str,
    concurrency: int = 4,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> RunResult:
    """Every case, at most `concurrency` requests in flight; results in suite order."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    started_at_s, start = wall_clock(), clock()
    gate = asyncio.Semaphore(concurrency)
    metadata: dict[str, asyncio.Task[dict[str, str]]] = {}

    async def one(case: Case) -> CaseResult:
        async with gate:
            datatypes: Mapping[str, str] = {}
            if case.endpoint == "v2" and uses_row_form(case):
                # One metadata request per model, shared by its cases.
                key = model_path(case)
                if key not in metadata:
                    metadata[key] = asyncio.ensure_future(_datatypes(transport, case))
                datatypes = await metadata[key]
            return await run_case(case, transport, datatypes, clock)

    results = await asyncio.gather(*(one(case) for case in suite.cases))
    return RunResult(suite.name, url, started_at_s, clock() - start, tuple(results))
