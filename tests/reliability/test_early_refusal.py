"""A tensor request to a model whose queue is full is refused before its body is read
(issue 15 item 9): the refusal costs no body read and no decode. Measured under 10x
overload by benchmarks/overload.py; this test shows the order of events."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio

from podserve.config.settings import ServerSettings
from podserve.core.errors import Draining, ModelNotFound, Unavailable
from podserve.dataplane import DataPlane
from podserve.dataplane.build import build_dataplane
from podserve.server.app import App
from tests.middle.conftest import eventually, make_repository
from tests.middle.gated import GATES

BODY = orjson.dumps(
    {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}
)


@pytest_asyncio.fixture
async def plane(tmp_path: Path) -> AsyncIterator[DataPlane]:
    GATES.clear()
    settings = ServerSettings(
        model_repository=make_repository(tmp_path / "models"),
        cache_dir=tmp_path / "cache",
        grpc_port=-1,
    )
    dataplane = build_dataplane(settings, asyncio.get_running_loop())
    await dataplane.load_preloaded()
    yield dataplane
    for gate in GATES.values():
        gate.open.set()
    for entry in dataplane.repository_index():
        with contextlib.suppress(Exception):
            await dataplane.unload_model(entry.name)


def queue_depth(plane: DataPlane, model: str) -> int:
    return next(m.queue_depth for m in plane.serving_state().models if m.name == model)


async def test_a_full_queue_refuses_before_reading_the_body(plane: DataPlane) -> None:
    app = App(plane)
    gate = GATES["gated"]  # one instance, max_queue 1
    gate.open.clear()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://podserve"
    ) as client:
        running = asyncio.ensure_future(client.post("/v2/models/gated/infer", content=BODY))
        await eventually(gate.entered.is_set, "the instance to be busy")
        queued = asyncio.ensure_future(client.post("/v2/models/gated/infer", content=BODY))
        await eventually(lambda: queue_depth(plane, "gated") == 1, "a queued request")

        reads: list[str] = []
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            reads.append("body")
            return {"type": "http.request", "body": BODY, "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(dict(message))

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v2/models/gated/infer",
            "headers": [(b"content-length", str(len(BODY)).encode())],
        }
        await app(scope, receive, send)
        assert sent[0]["status"] == 503
        assert b"queue is full" in sent[1]["body"]
        assert (b"retry-after", b"1") in sent[0]["headers"]
        assert reads == []  # refused unread

        gate.open.set()
        assert (await running).status_code == 200
        assert (await queued).status_code == 200


class HeldBody:
    """An ASGI request whose body the test hands over when it likes: the time a real
    client's body spends in transit and in the decoder, without timing anything."""

    def __init__(self, body: bytes = BODY, *, disconnect: bool = False) -> None:
        self.body = body
        self.disconnect = disconnect
        self.deliver = asyncio.Event()
        self.reads = 0
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        self.reads += 1
        if self.reads > 1:  # the app's disconnect watcher, after the body
            await asyncio.Event().wait()
        await self.deliver.wait()
        if self.disconnect:
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": self.body, "more_body": False}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.sent.append(dict(message))

    def awaited(self) -> bool:
        """Whether the app asked for the body (so admission let the request by)."""
        return self.reads >= 1

    def scope(self) -> dict[str, Any]:
        return {
            "type": "http",
            "method": "POST",
            "path": "/v2/models/gated/infer",
            "headers": [(b"content-length", str(len(self.body)).encode())],
        }

    def start(self, app: App) -> asyncio.Future[None]:
        return asyncio.ensure_future(app(self.scope(), self.receive, self.send))

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])


async def occupy_the_instance(app: App, client: httpx.AsyncClient) -> asyncio.Future[Any]:
    """A request running on `gated`'s one instance, held at its gate (closed)."""
    gate = GATES["gated"]
    gate.open.clear()
    running = asyncio.ensure_future(client.post("/v2/models/gated/infer", content=BODY))
    await eventually(gate.entered.is_set, "the instance to be busy")
    return running


async def test_a_request_still_sending_its_body_holds_no_queue_slot(plane: DataPlane) -> None:
    """`gated` queues one request. A request whose body is still arriving holds no slot:
    a client trickling its body held one until body_timeout_s, and enough of them refused
    every request to the model while its queue was empty. The next request is let by and
    queued; the slow one, once its body is in, finds the queue full and is refused, read
    but not decoded."""
    app = App(plane)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://podserve"
    ) as client:
        running = await occupy_the_instance(app, client)
        slow = HeldBody()
        slow_call = slow.start(app)
        await eventually(slow.awaited, "the slow request to read its body")

        later = HeldBody()
        later.deliver.set()
        later_call = later.start(app)
        await eventually(lambda: queue_depth(plane, "gated") == 1, "the later one queued")

        slow.deliver.set()
        await slow_call
        assert slow.status == 503
        assert b"queue is full" in slow.sent[1]["body"]

        GATES["gated"].open.set()
        await later_call
        assert later.status == 200
        assert (await running).status_code == 200


async def test_a_request_being_decoded_holds_its_queue_slot(plane: DataPlane) -> None:
    """Once its body is in, an admitted request holds its slot while it is decoded: a
    request arriving meanwhile is refused unread (without the promise, both were read and
    decoded, and one refused after its decode)."""
    app = App(plane)
    decoding = asyncio.Event()
    resume = asyncio.Event()
    original = plane.infer

    async def held_infer(*args: Any, **kwargs: Any) -> Any:
        decoding.set()  # the body is read and decoded: this is the hand-off to admission
        await resume.wait()
        return await original(*args, **kwargs)

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://podserve"
    ) as client:
        running = await occupy_the_instance(app, client)
        plane.infer = held_infer  # type: ignore[method-assign]
        admitted = HeldBody()
        admitted.deliver.set()
        admitted_call = admitted.start(app)
        await decoding.wait()
        plane.infer = original  # type: ignore[method-assign]
        assert queue_depth(plane, "gated") == 0

        later = HeldBody()
        later.deliver.set()
        await app(later.scope(), later.receive, later.send)
        assert later.status == 503
        assert later.reads == 0  # refused unread
        assert b"queue is full" in later.sent[1]["body"]

        resume.set()
        await eventually(lambda: queue_depth(plane, "gated") == 1, "the admitted one queued")
        GATES["gated"].open.set()
        await admitted_call
        assert admitted.status == 200
        assert (await running).status_code == 200


async def test_a_request_that_fails_before_the_queue_gives_its_slot_back(
    plane: DataPlane,
) -> None:
    """A body that does not decode, and a client that leaves before its body arrives:
    each gives its slot back, so the next request is queued, not refused."""
    app = App(plane)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://podserve"
    ) as client:
        running = await occupy_the_instance(app, client)
        for failing, expected in (
            (HeldBody(b'{"inputs": ['), 400),
            (HeldBody(disconnect=True), None),
        ):
            call = failing.start(app)
            await eventually(failing.awaited, "the body to be awaited")
            failing.deliver.set()
            await call
            assert (failing.status if failing.sent else None) == expected

        queued = HeldBody()
        queued.deliver.set()
        queued_call = queued.start(app)
        await eventually(lambda: queue_depth(plane, "gated") == 1, "the next request queued")
        GATES["gated"].open.set()
        await queued_call
        assert queued.status == 200
        assert (await running).status_code == 200


def test_admission_promises_no_more_slots_than_the_queue_holds(plane: DataPlane) -> None:
    """The data plane's side: `gated` queues one request. A promised slot fills it for
    `admit_early` and `refuse_early` alike, counted
    as a queue_full rejection; released, it is free again."""
    slot = plane.admit_early("gated")
    assert slot is not None
    assert slot.held
    for admit in (plane.admit_early, plane.refuse_early):
        with pytest.raises(Unavailable, match="queue is full") as refused:
            admit("gated")
        assert refused.value.reason == "queue_full"
    slot.release()
    again = plane.admit_early("gated")
    assert again is not None
    again.release()
    exposition, _ = plane.metrics_exposition()
    assert b'podserve_rejected_requests_total{model="gated",reason="queue_full"} 2.0' in exposition


def test_no_slot_is_promised_to_a_draining_server_or_an_unknown_model(plane: DataPlane) -> None:
    with pytest.raises(ModelNotFound):
        plane.admit_early("no-such-model")
    plane.begin_drain()
    with pytest.raises(Draining):
        plane.admit_early("gated")


async def test_grpc_takes_and_gives_back_its_queue_slot_as_rest_does(plane: DataPlane) -> None:
    """The gRPC edge admits with `admit_early` too: a slot promised to another request
    refuses its call UNAVAILABLE (queue full), and every call it lets by gives its slot
    back however it ends (served, or refused by its decode), so `gated`'s one slot is
    free again after each."""
    import grpc
    from tritonclient.grpc import service_pb2 as triton_pb
    from tritonclient.grpc import service_pb2_grpc as triton_stub

    from podserve.server.grpc import start_grpc_server, stop_grpc_server

    server, port = await start_grpc_server(plane, "127.0.0.1", 0, max_message_bytes=1 << 20)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = triton_stub.GRPCInferenceServiceStub(channel)

            def request(raw: bytes) -> triton_pb.ModelInferRequest:
                message = triton_pb.ModelInferRequest(model_name="gated")
                message.inputs.add(name="x", datatype="FP32", shape=[1, 3])
                message.raw_input_contents.append(raw)
                return message

            def slot_is_free() -> bool:
                slot = plane.admit_early("gated")
                assert slot is not None
                slot.release()
                return True

            held = plane.admit_early("gated")
            assert held is not None
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.ModelInfer(request(bytes(12)), timeout=30)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "queue is full" in str(refused.value.details())
            held.release()

            with pytest.raises(grpc.aio.AioRpcError) as bad:  # 8 bytes for 3 FP32 values
                await stub.ModelInfer(request(bytes(8)), timeout=30)
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert slot_is_free()

            GATES["gated"].open.set()
            served = await stub.ModelInfer(request(bytes(12)), timeout=30)
            assert served.model_name == "gated"
            assert slot_is_free()
    finally:
        await stop_grpc_server(server, grace_s=0)
