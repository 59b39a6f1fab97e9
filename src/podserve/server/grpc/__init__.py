"""The Open Inference Protocol v2 gRPC edge: `inference.GRPCInferenceService`."""

from podserve.server.grpc.server import start_grpc_server, stop_grpc_server
from podserve.server.grpc.service import InferenceServicer
from podserve.server.grpc.status import status_for

__all__ = ["InferenceServicer", "start_grpc_server", "status_for", "stop_grpc_server"]
