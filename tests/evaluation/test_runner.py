"""The runner on a fake transport: failures become failed cases with reasons, concurrency is
bounded, metadata is fetched once per model, results keep suite order."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson

from podserve.evaluation.runner import HttpReply, TransportError, run_suite
from podserve.evaluation.suite import parse_suite

Handler = Callable[[str, str, bytes | None], HttpReply]


class FakeTransport:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.calls: list[tuple[str, str]] = []

    async def request(self, method: str, path: str, body: bytes | None = None) -> HttpReply:
        self.calls.append((method, path))
        return self.handler(method, path, body)


def reply(document: object, status: int = 200) -> HttpReply:
    return HttpReply(status, orjson.dumps(document))


def outputs(**tensors: list[object]) -> HttpReply:
    return reply({"outputs": [{"name": n, "data": d} for n, d in tensors.items()]})


SUITE = "\n".join(
    [
        '{"id": "ok", "tags": ["t"], "model": "m", "inputs": {"x": [1.0]},'
        ' "expect": [{"kind": "exact", "output": "y", "value": 2.0}]}',
        '{"id": "wrong", "tags": ["t"], "model": "m", "inputs": {"x": [2.0]},'
        ' "expect": [{"kind": "exact", "output": "y", "value": 5.0},'
        ' {"kind": "numeric", "output": "z", "value": 1.0}]}',
        '{"id": "missing", "model": "gone", "inputs": {"x": {"datatype": "FP32", "shape": [1],'
        ' "data": [1.0]}}, "expect": [{"kind": "exact", "value": 1}]}',
    ]
)


def handler(method: str, path: str, body: bytes | None) -> HttpReply:
    if method == "GET":
        return reply({"inputs": [{"name": "x", "datatype": "FP64", "shape": [-1, 1]}]})
    if path == "/v2/models/gone/infer":
        return reply({"error": "model 'gone' not found"}, status=404)
    request = orjson.loads(body or b"{}")
    assert request["inputs"][0]["datatype"] == "FP64"  # from the metadata, not inferred
    value = request["inputs"][0]["data"][0]
    return outputs(y=[value * 2])


async def test_failures_are_failed_cases_with_reasons() -> None:
    transport = FakeTransport(handler)
    result = await run_suite(parse_suite(SUITE, "s"), transport, url="http://fake")
    assert [c.id for c in result.cases] == ["ok", "wrong", "missing"]
    ok, wrong, missing = result.cases
    assert ok.passed
    assert ok.status == 200
    assert not wrong.passed
    assert wrong.reasons == (
        "check 1 (exact y): got 4.0, expected 5.0",
        "check 2 (numeric z): no output 'z' (outputs: y)",
    )
    assert not missing.passed
    assert missing.status == 404
    assert missing.reasons == ('HTTP 404: {"error":"model \'gone\' not found"}',)
    # One metadata request for model m, though two cases use the row form.
    assert transport.calls.count(("GET", "/v2/models/m")) == 1
    assert result.ratios()["t"].value == 0.5
    assert result.reachable


async def test_transport_errors_fail_cases_and_mark_reachability() -> None:
    def refuse(method: str, path: str, body: bytes | None) -> HttpReply:
        raise TransportError("cannot connect: refused", unreachable=True)

    result = await run_suite(parse_suite(SUITE, "s"), FakeTransport(refuse), url="http://x")
    assert not result.reachable
    assert result.cases[0].reasons == ("request failed: cannot connect: refused",)
    assert result.cases[0].status is None

    def slow(method: str, path: str, body: bytes | None) -> HttpReply:
        raise TransportError("no response within 1s", unreachable=False)

    result = await run_suite(parse_suite(SUITE, "s"), FakeTransport(slow), url="http://x")
    assert result.reachable  # a timeout means something answered the connection
    assert result.cases[0].reasons == ("request failed: no response within 1s",)


async def test_non_json_and_invalid_cases() -> None:
    suite = parse_suite(
        '{"id": "a", "model": "m", "inputs": {"x": {"datatype": "FP32", "shape": [1],'
        ' "data": [1]}}, "expect": [{"kind": "exact", "value": 1}]}\n'
        '{"id": "b", "model": "m", "inputs": {"x": [[1.0], [1.0, 2.0]]},'
        ' "expect": [{"kind": "exact", "value": 1}]}',
        "s",
    )

    def html(method: str, path: str, body: bytes | None) -> HttpReply:
        return HttpReply(200, b"<html>proxy</html>")

    result = await run_suite(suite, FakeTransport(html), url="http://x")
    assert result.cases[0].reasons == ("response is not JSON",)
    assert result.cases[1].reasons[0].startswith("invalid case: case b: input x: ragged")


async def test_concurrency_is_bounded() -> None:
    lines = [
        f'{{"id": "c{i}", "model": "m", "inputs": {{"x": {{"datatype": "FP32", "shape": [1],'
        f' "data": [1.0]}}}}, "expect": [{{"kind": "exact", "value": 2.0}}]}}'
        for i in range(12)
    ]
    suite = parse_suite("\n".join(lines), "s")
    in_flight = 0
    peak = 0
    release = asyncio.Event()
    arrived = asyncio.Condition()

    class Gated:
        async def request(self, method: str, path: str, body: bytes | None = None) -> HttpReply:
            nonlocal in_flight, peak
            async with arrived:
                in_flight += 1
                peak = max(peak, in_flight)
                arrived.notify_all()
            await release.wait()
            in_flight -= 1
            return outputs(y=[2.0])

    task = asyncio.create_task(run_suite(suite, Gated(), url="http://x", concurrency=3))
    async with arrived:
        await arrived.wait_for(lambda: in_flight == 3)
    # Three requests are parked on `release`; `peak` records any fourth admitted at any
    # point of the run, before or after the release.
    release.set()
    result = await task
    assert peak == 3
    assert result.pass_ratio == 1.0
