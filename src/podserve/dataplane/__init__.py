"""The transport-free data plane that REST, gRPC and in-process callers all call.

dataplane = build_dataplane(settings, loop)          # podserve.server.runner
response = await dataplane.infer(InferRequest(...), CallContext(endpoint="consume"))
generation = await dataplane.generate(GenerateRequest(...))
"""

from podserve.dataplane.api import DataPlaneAPI
from podserve.dataplane.dataplane import DataPlane, EdgeLimits
from podserve.dataplane.streams import GenerationStream
from podserve.dataplane.types import (
    CallContext,
    ChatMessage,
    GenerateRequest,
    Generation,
    HealthReport,
    ModelConfigView,
    ModelMetadata,
    RepositoryEntry,
    ServerMetadata,
)

__all__ = [
    "CallContext",
    "ChatMessage",
    "DataPlane",
    "DataPlaneAPI",
    "EdgeLimits",
    "GenerateRequest",
    "Generation",
    "GenerationStream",
    "HealthReport",
    "ModelConfigView",
    "ModelMetadata",
    "RepositoryEntry",
    "ServerMetadata",
]
