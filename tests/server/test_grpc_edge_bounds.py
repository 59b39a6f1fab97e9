"""What the gRPC edge of a real `podserve serve` process bounds before a handler runs
(server/grpc/limits.py, server/grpc/handlers.py): connections, idle connections, calls
at once, compressed messages and the size of non-inference messages. Clients: grpcio
stubs and raw sockets speaking the HTTP/2 preface, as an idle gRPC channel does.

The server runs with small bounds (`--grpc-max-connections 8`, `--grpc-idle-timeout-s
1`, `--grpc-max-concurrent-rpcs 4`) so that reaching them takes a few sockets. No test
asserts a time: each waits for a real condition (a socket closed by the server, a call
that answers)."""

from __future__ import annotations

import contextlib
import queue
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from tests.support.server import ServerProcess, wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
MAX_CONNECTIONS = 8
MAX_RPCS = 4
CONTROL_BYTES = 64 * 1024  # server/http.py CONTROL_BODY_BYTES
# The client's HTTP/2 connection preface, an empty SETTINGS frame and the ACK of the
# server's SETTINGS (RFC 9113 §3.4, §6.5): what an idle gRPC channel has sent.
PREFACE = (
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    + b"\x00\x00\x00\x04\x01\x00\x00\x00\x00"
)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess(
        "--model",
        f"simple={EXAMPLES / 'simple'}",
        "--grpc-max-connections",
        str(MAX_CONNECTIONS),
        "--grpc-idle-timeout-s",
        "1",
        "--grpc-max-concurrent-rpcs",
        str(MAX_RPCS),
        grpc=True,
    ) as process:
        wait_until(lambda: process.get("/ready").status_code == 200, timeout_s=120, what="ready")
        yield process


@contextlib.contextmanager
def stub(server: ServerProcess) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    # a channel of its own (no subchannel shared with another test's), no retries
    options = [("grpc.use_local_subchannel_pool", 1), ("grpc.enable_retries", 0)]
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", options=options) as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


def live_over_grpc(server: ServerProcess) -> bool:
    with stub(server) as client:
        try:
            return bool(client.ServerLive(pb.ServerLiveRequest(), timeout=5).live)
        except grpc.RpcError:
            return False


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` (what it sent before is read and dropped)."""
    sock.setblocking(False)
    try:
        while chunk := sock.recv(65536):
            del chunk
        return True  # end of stream
    except BlockingIOError:
        return False
    except OSError:
        return True  # reset


def rpc_error(call: Any, *args: Any, **kwargs: Any) -> Any:
    with pytest.raises(grpc.RpcError) as raised:
        call(*args, **kwargs)
    return raised.value


# ------------------------------------------------------------------ connections


def test_connections_past_the_cap_are_closed_and_rest_still_answers(
    server: ServerProcess,
) -> None:
    """Before: every connection was kept; 20,000 of them used up the descriptors and
    REST's /healthz was reset (/tmp/probe-grpc/p13_fds.py)."""
    assert server.grpc_port is not None
    sockets = [
        socket.create_connection(("127.0.0.1", server.grpc_port))
        for _ in range(4 * MAX_CONNECTIONS)
    ]
    try:
        for sock in sockets:
            sock.sendall(PREFACE)
        # grpc core closes each one past the cap as it accepts it
        wait_until(
            lambda: sum(closed_by_server(s) for s in sockets) >= 3 * MAX_CONNECTIONS,
            timeout_s=30,
            what="the connections past the cap closed",
        )
        assert server.get("/healthz").status_code == 200
    finally:
        for sock in sockets:
            sock.close()


def test_idle_connections_are_closed_and_grpc_serves_again(server: ServerProcess) -> None:
    """A connection that ACKed the server's SETTINGS and sent nothing more stayed open
    for good (/tmp/probe-grpc/p14b_idle_ack.py); now it is closed once idle, so idle
    connections that fill the cap free it (`--grpc-idle-timeout-s`)."""
    assert server.grpc_port is not None
    sockets = [
        socket.create_connection(("127.0.0.1", server.grpc_port)) for _ in range(MAX_CONNECTIONS)
    ]
    try:
        for sock in sockets:
            sock.sendall(PREFACE)
        wait_until(
            lambda: all(closed_by_server(s) for s in sockets),
            timeout_s=60,
            what="every idle connection closed by the server",
        )
    finally:
        for sock in sockets:
            sock.close()
    wait_until(lambda: live_over_grpc(server), timeout_s=60, what="gRPC ServerLive answering")


def test_calls_past_the_concurrent_rpc_cap_are_resource_exhausted(server: ServerProcess) -> None:
    """`--grpc-max-concurrent-rpcs`: open ModelStreamInfer streams count one call each;
    past the cap grpc.aio answers RESOURCE_EXHAUSTED before a handler runs."""
    feeds: list[queue.Queue[pb.ModelInferRequest | None]] = []
    with stub(server) as client:
        streams = []
        for _ in range(MAX_RPCS):
            feed: queue.Queue[pb.ModelInferRequest | None] = queue.Queue()
            feeds.append(feed)
            streams.append(client.ModelStreamInfer(iter(feed.get, None), timeout=120))
        try:
            # every stream is open once the server has taken all the slots
            def refused() -> bool:
                try:
                    client.ServerLive(pb.ServerLiveRequest(), timeout=5)
                except grpc.RpcError as exc:
                    return bool(exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED)
                return False

            wait_until(refused, timeout_s=30, what="a call past the cap refused")
            error = rpc_error(client.ServerLive, pb.ServerLiveRequest(), timeout=5)
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "Concurrent RPC limit exceeded" in error.details()
        finally:
            for feed in feeds:
                feed.put(None)  # the client closes its side: each stream ends OK
            for stream in streams:
                assert list(stream) == []
    wait_until(lambda: live_over_grpc(server), timeout_s=30, what="calls served again")


# ------------------------------------------------------------------ compression


@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.Deflate])
def test_compressed_requests_are_refused_unimplemented(
    server: ServerProcess, compression: grpc.Compression
) -> None:
    """A gzip message of 49 KB became 50 MB of protobuf in the server (+1.1 GB RSS,
    /healthz held 1.1-2.5 s: /tmp/probe-grpc/p15_gzip.py). Now grpc core refuses the
    call from its `grpc-encoding` before the message is read, as REST answers 415."""
    request = pb.ModelInferRequest(model_name="simple")
    with stub(server) as client:
        for call, message in (
            (client.ServerLive, pb.ServerLiveRequest()),
            (client.ModelInfer, request),
        ):
            error = rpc_error(call, message, timeout=10, compression=compression)
            assert error.code() == grpc.StatusCode.UNIMPLEMENTED
            assert "is disabled" in error.details()
        replies = client.ModelStreamInfer(iter([request]), timeout=10, compression=compression)
        error = rpc_error(list, replies)
        assert error.code() == grpc.StatusCode.UNIMPLEMENTED
        # uncompressed calls on the same channel are served
        assert client.ServerLive(pb.ServerLiveRequest(), timeout=10).live


# ------------------------------------------------------------------ non-inference messages


def unknown_fields(size: int) -> bytes:
    """Valid protobuf of `size` bytes for any request message: one unknown field 1000
    of length-delimited bytes, which every parser must read and keep."""
    tag = bytes([(1000 << 3 | 2) & 0x7F | 0x80, (1000 << 3 | 2) >> 7])
    length = size - len(tag) - 3  # a 3-byte varint holds lengths up to 2 MiB
    varint = bytes([length & 0x7F | 0x80, (length >> 7) & 0x7F | 0x80, length >> 14])
    data = tag + varint + b"x" * length
    assert len(data) == size
    return data


@pytest.mark.parametrize(
    ("method", "response"),
    [
        ("ServerLive", pb.ServerLiveResponse),
        ("ModelMetadata", pb.ModelMetadataResponse),
        ("RepositoryModelLoad", pb.RepositoryModelLoadResponse),
        ("SystemSharedMemoryRegister", pb.SystemSharedMemoryRegisterResponse),
    ],
)
def test_non_inference_messages_over_64_kib_are_refused_unparsed(
    server: ServerProcess, method: str, response: Any
) -> None:
    """They were parsed on the event loop up to the request limit (64 MiB): 30 M map
    entries to RepositoryModelLoad held /healthz 3 s (/tmp/probe-grpc/p08_control.py)."""
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        call = channel.unary_unary(
            f"/inference.GRPCInferenceService/{method}",
            request_serializer=bytes,
            response_deserializer=response.FromString,
        )
        error = rpc_error(call, unknown_fields(CONTROL_BYTES + 1), timeout=30)
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error.details() == (
            f"a {method} request message is at most {CONTROL_BYTES} bytes, got {CONTROL_BYTES + 1}"
        )
        if method == "ServerLive":  # at the limit it is parsed and answered
            assert call(unknown_fields(CONTROL_BYTES), timeout=30).live
    assert server.get("/healthz").status_code == 200
