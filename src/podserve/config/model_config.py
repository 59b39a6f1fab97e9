"""The per-model configuration file (`model.yaml` beside the model's artefacts).

Every field is documented here once; `docs/model-config.md` is generated from these
descriptions, so code and docs cannot disagree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from podserve.core.errors import InvalidInput
from podserve.core.tensors import Datatype, TensorSpec

MODEL_CONFIG_FILENAME = "model.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TensorConfig(_Strict):
    name: str = Field(description="Tensor name as clients send it.")
    datatype: Datatype = Field(description="Open Inference Protocol datatype, e.g. FP32 or BYTES.")
    shape: list[int] = Field(
        description="Shape including the batch dimension first; -1 means any size."
    )

    def to_spec(self) -> TensorSpec:
        return TensorSpec(name=self.name, datatype=self.datatype, shape=tuple(self.shape))


class BatchingConfig(_Strict):
    enabled: bool = Field(True, description="Group concurrent requests into one model call.")
    max_batch_size: int = Field(
        32, ge=1, description="Most rows (sum of requests' batch dimensions) in one model call."
    )
    preferred_batch_sizes: list[int] = Field(
        default_factory=list,
        description="Batch sizes the batcher dispatches as soon as it can form them (Triton's "
        "preferred_batch_size).",
    )
    max_queue_delay_ms: float = Field(
        0.0,
        ge=0,
        description="How long the oldest queued request may wait for company before its batch "
        "goes. With work_conserving on, this applies only while every worker is busy.",
    )
    work_conserving: bool = Field(
        True,
        description="When a worker is idle, dispatch what is queued at once: a lone request "
        "never waits for company.",
    )

    @model_validator(mode="after")
    def _preferred_within_max(self) -> BatchingConfig:
        for size in self.preferred_batch_sizes:
            if not 1 <= size <= self.max_batch_size:
                raise ValueError(
                    f"preferred batch size {size} is outside "
                    f"1..max_batch_size={self.max_batch_size}"
                )
        return self


class LimitsConfig(_Strict):
    max_queue: int | None = Field(
        None, ge=1, description="Queued requests for this model before 503; default: server's."
    )
    max_batch_time_s: float = Field(
        60.0,
        gt=0,
        description="Longest one model call may run before the watchdog declares the worker "
        "wedged and /healthz fails.",
    )
    default_timeout_s: float | None = Field(
        None, gt=0, description="Deadline applied to requests that carry none."
    )


class ModelConfig(_Strict):
    name: str = Field(description="Model name used in URLs (/v2/models/{name}).")
    runtime: str = Field(
        description="sklearn, onnx, torchscript, torch, fake, or custom (with `model_class`)."
    )
    artifact: str | None = Field(
        None, description="Path of the model file relative to the model directory."
    )
    model_class: str | None = Field(
        None,
        description="Import path `package.module:Class` of a custom model (runtime: custom, or "
        "the module class for runtime: torch with safetensors weights).",
    )
    version: str = Field(
        "1",
        description="Version reported in metadata and URLs. Numeric sub-directories "
        "(`<name>/1/`, `<name>/2/`) override it: each is a version with its own artefacts, "
        "and the highest is `latest`.",
    )
    version_policy: Literal["latest", "all"] = Field(
        "latest",
        description="With version sub-directories: preload only the latest version, or all.",
    )
    digest: str | None = Field(
        None,
        description="`sha256:<hex>` the model directory must match (see docs/storage.md); "
        "a mismatch refuses to serve, naming expected and actual.",
    )
    memory_bytes: int | None = Field(
        None,
        ge=1,
        description="Memory the loaded model takes, for the server's memory budget; "
        "default: the size of its files.",
    )
    preload: bool = Field(True, description="Load at startup; /startup waits for it.")
    instance_count: int = Field(
        1,
        ge=1,
        description="Worker threads running this model's batches concurrently. For torch "
        "models on CPU keep 1: each thread keeps an OpenMP team of its own, and with more "
        "OpenMP threads than CPUs libgomp sleeps at every parallel region's barrier (25% "
        "slower per call here: `benchmarks/openmp_teams.py`).",
    )
    platform: str = Field("", description="Free-form platform string for model metadata.")
    inputs: list[TensorConfig] = Field(default_factory=list, description="Declared inputs.")
    outputs: list[TensorConfig] = Field(default_factory=list, description="Declared outputs.")
    batching: BatchingConfig = Field(default_factory=BatchingConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    warmup: bool = Field(
        True, description="Run one inference on zeros of the declared inputs after loading."
    )
    parameters: dict[str, Any] = Field(
        default_factory=dict,
        description="Runtime-specific options, typed per runtime and checked at load: an "
        "unknown key fails the load (see docs/runtimes.md).",
    )
    # Set by the loader, not by the file: the directory the artefacts live in, and for a
    # model named by URI, that URI (fetched into the node cache before loading).
    directory: Path | None = Field(None, exclude=True)
    source_uri: str | None = Field(None, exclude=True)

    @field_validator("name")
    @classmethod
    def _url_safe_name(cls, value: str) -> str:
        if not value or "/" in value or value.strip() != value:
            raise ValueError("model name must be non-empty, without '/' or surrounding spaces")
        return value

    def artifact_path(self) -> Path:
        base = self.directory or Path(".")
        return base / self.artifact if self.artifact else base

    def input_specs(self) -> tuple[TensorSpec, ...]:
        return tuple(t.to_spec() for t in self.inputs)

    def output_specs(self) -> tuple[TensorSpec, ...]:
        return tuple(t.to_spec() for t in self.outputs)


def load_model_config(directory: Path) -> ModelConfig:
    """Read `<directory>/model.yaml`; errors name the file and the offending field."""
    path = directory / MODEL_CONFIG_FILENAME
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise InvalidInput(f"cannot read model config {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise InvalidInput(f"model config {path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise InvalidInput(f"model config {path} must be a mapping")
    raw.setdefault("name", directory.name)
    try:
        return ModelConfig(**raw, directory=directory.resolve())
    except ValidationError as exc:
        raise InvalidInput(f"model config {path}: {_describe(exc)}") from exc


def _describe(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}" for err in exc.errors()
    )
