"""Messages between the edges (REST, gRPC, the stream consumer, any in-process caller)
and the data plane. Typed and transport-free: no HTTP header or gRPC context crosses."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from podserve.admission import Reservation
from podserve.core.health import HealthReport
from podserve.core.tensors import TensorSpec
from podserve.core.triton import ModelConfigView
from podserve.dataplane.streams import GenerationStream
from podserve.generation.sampling import SamplingParams

__all__ = [
    "CallContext",
    "ChatMessage",
    "GenerateRequest",
    "Generation",
    "HealthReport",
    "ModelConfigView",
    "ModelMetadata",
    "RepositoryEntry",
    "ServerMetadata",
]

ChatMessage = Mapping[str, str]


@dataclass(frozen=True, slots=True)
class CallContext:
    """What an edge knows about one call besides its payload.

    `timeout_ms` is the client's timeout as the edge received it outside the payload (the
    `x-request-timeout-ms` header), unparsed: the data plane validates it. `client_timeout_s`
    is the time the transport itself grants (a gRPC deadline, as `time_remaining()`), so
    the data plane turns it into a deadline on its own clock.

    Cancellation is task cancellation, for every caller: cancel the task awaiting
    `DataPlane.infer` and a queued request leaves its queue at once (a running one
    finishes on its thread and is dropped); close a `GenerationStream` and its sequence
    is aborted, freeing its slot and KV cache.
    """

    endpoint: str = "inprocess"
    request_id: str | None = None
    timeout_ms: str | None = None
    client_timeout_s: float | None = None
    # the credential a repository call carried (dataplane/model_control.py)
    admin_token: str | None = None
    # the queue slot `DataPlane.admit_early` promised this call; `infer` releases it as
    # the request enters the queue (admission/reservations.py)
    reservation: Reservation | None = None


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    """One text-generation request: a prompt (text, or chat messages for the model's
    chat template) and one `SamplingParams` per sequence to generate (OpenAI's `n`).
    `parameters` are the request's own, as `InferRequest.parameters`: the data plane
    reads Triton's `timeout` (microseconds) there, unvalidated until then."""

    model: str
    sequences: tuple[SamplingParams, ...]
    prompt: str | None = None
    messages: Sequence[ChatMessage] | None = None
    version: str | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("a GenerateRequest has exactly one of prompt and messages")


@dataclass(frozen=True, slots=True)
class Generation:
    """An admitted generation: every sequence already holds its engine slot. Read each
    stream to its end or close it; each counts as in flight for the drain until then."""

    model: str
    version: str
    prompt_tokens: int
    streams: list[GenerationStream]
    token_text: Callable[[int], str]


@dataclass(frozen=True, slots=True)
class ServerMetadata:
    name: str
    version: str
    extensions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]


@dataclass(frozen=True, slots=True)
class RepositoryEntry:
    name: str
    version: str
    state: str  # OIP repository states: UNAVAILABLE, LOADING, READY, UNLOADING
    reason: str = ""
