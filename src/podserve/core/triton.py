"""Triton's model-configuration and statistics messages, as plain data: the engine
fills them, the data plane returns them, and both edges encode them."""

from __future__ import annotations

from dataclasses import dataclass, field

from podserve.core.tensors import TensorSpec


@dataclass(frozen=True, slots=True)
class ModelConfigView:
    """A model's configuration in Triton's terms (its `model_config` extension)."""

    name: str
    version: str
    platform: str
    backend: str  # podserve's runtime
    max_batch_size: int  # 0: the model does not batch (Triton's meaning)
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    dynamic_batching: bool
    preferred_batch_sizes: tuple[int, ...]
    max_queue_delay_us: int
    instance_count: int
    parameters: dict[str, str]


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, seconds: float, times: int = 1) -> None:
        self.count += times
        self.ns += int(seconds * 1e9) * times


@dataclass(frozen=True, slots=True)
class BatchStatistics:
    batch_size: int
    compute_infer: Duration  # predict
    compute_input: Duration = field(default_factory=Duration)  # preprocess
    compute_output: Duration = field(default_factory=Duration)  # postprocess


@dataclass(frozen=True, slots=True)
class ModelStatistics:
    name: str
    version: str
    last_inference_ms: int  # wall-clock milliseconds since the epoch; 0 before the first
    inference_count: int  # rows computed
    execution_count: int  # model calls
    success: Duration
    fail: Duration
    queue: Duration
    compute_infer: Duration  # predict
    batches: tuple[BatchStatistics, ...] = ()
    compute_input: Duration = field(default_factory=Duration)  # preprocess
    compute_output: Duration = field(default_factory=Duration)  # postprocess
