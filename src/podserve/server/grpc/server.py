"""Start and stop the grpc.aio server that serves `inference.GRPCInferenceService`."""

from __future__ import annotations

import weakref

import grpc

from podserve.dataplane.api import DataPlaneAPI
from podserve.httpedge.decoding import BodyDecoding
from podserve.server.cut import InflightRequests
from podserve.server.grpc.cut import CuttableServicer
from podserve.server.grpc.handlers import add_inference_service
from podserve.server.grpc.limits import GrpcLimits
from podserve.server.grpc.service import InferenceServicer

# The servicer of each server that can end its open streams when it stops.
_CUTTABLE: weakref.WeakKeyDictionary[grpc.aio.Server, CuttableServicer] = (
    weakref.WeakKeyDictionary()
)
# The decoding thread of a server not given the process's (tests), closed when it stops.
_OWN_DECODING: weakref.WeakKeyDictionary[grpc.aio.Server, BodyDecoding] = (
    weakref.WeakKeyDictionary()
)


def _address(host: str, port: int) -> str:
    # An IPv6 literal needs brackets before the port.
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"


async def start_grpc_server(
    dataplane: DataPlaneAPI,
    host: str,
    port: int,
    *,
    max_message_bytes: int,
    inflight: InflightRequests | None = None,
    decoding: BodyDecoding | None = None,
    limits: GrpcLimits | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Serve the data plane over gRPC on host:port and return the server and its bound
    port (port 0 picks a free one). Raises OSError when the address cannot be bound.

    `max_message_bytes` caps received messages (`--max-body-bytes`, the request limit): a
    larger request is refused by gRPC itself with RESOURCE_EXHAUSTED before it is decoded.
    Sent messages are not capped, as REST does not cap a response: a small request may
    have a big answer (an embedding per text), computed by then, and grpc's default send
    cap is unlimited too. SO_REUSEPORT is off, so a second server on the same port fails
    loudly instead of silently sharing its traffic.

    With `inflight` (the server process's, shared with the REST edge), the inference
    calls register there, and a drain timeout's `inflight.cut()` ends each UNAVAILABLE
    (server/grpc/cut.py). `decoding`: where a big request's tensors are decoded (the
    process's, shared with the REST edge; a thread of the server's own when not given).
    `limits`: connections, streams, calls and compression (server/grpc/limits.py; the
    settings' defaults when not given).
    """
    if max_message_bytes <= 0:
        raise ValueError(f"max_message_bytes must be positive, got {max_message_bytes}")
    limits = limits or GrpcLimits()
    server = grpc.aio.server(
        options=limits.channel_options(max_message_bytes),
        maximum_concurrent_rpcs=limits.max_concurrent_rpcs,
    )
    if decoding is None:
        decoding = _OWN_DECODING[server] = BodyDecoding("podserve-grpc-decode")
    servicer = (
        InferenceServicer(dataplane, decoding)
        if inflight is None
        else CuttableServicer(dataplane, decoding, inflight)
    )
    add_inference_service(servicer, server)
    if isinstance(servicer, CuttableServicer):
        _CUTTABLE[server] = servicer
    address = _address(host, port)
    try:
        bound_port = int(server.add_insecure_port(address))
    except RuntimeError:  # grpc reports a failed bind as RuntimeError
        bound_port = 0
    if bound_port == 0:  # older grpc versions report a failed bind as port 0
        # Stopped here, on the running loop: left to the garbage collector, grpc.aio's
        # Server.__del__ schedules its shutdown on a loop that is closed by then and
        # prints a traceback ("Event loop is closed").
        await server.stop(None)
        raise OSError(f"cannot listen for gRPC on {address}: address in use or not available")
    await server.start()
    return server, bound_port


async def stop_grpc_server(server: grpc.aio.Server, grace_s: float) -> None:
    """Refuse new RPCs at once, let in-flight ones finish for up to `grace_s`, then cancel
    the rest (their data-plane calls are cancelled, the one cancellation contract).
    Open ModelStreamInfer streams end as soon as they have answered what they were sent
    (server/grpc/cut.py), so an idle one does not hold the stop for the whole grace."""
    servicer = _CUTTABLE.pop(server, None)
    own = _OWN_DECODING.pop(server, None)
    if own is not None:
        own.close()
    if servicer is not None and grace_s > 0:
        servicer.close_streams()
    await server.stop(grace_s)
