"""Server settings. Every field is a `podserve serve` flag (`--max-queue`), a `PODSERVE_*`
environment variable (`PODSERVE_MAX_QUEUE`) and a key of the YAML settings file
(`max_queue:`), in that order of precedence, over the defaults here.

Only the CLI builds these from the environment; everything below receives them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

DEFAULT_SETTINGS_FILE = Path("/etc/podserve/settings.yaml")


class ModelRef(BaseModel):
    """`NAME=SOURCE[:runtime]` from `--model`. SOURCE is a local path (a model directory
    or a single file) or a model URI (`s3://`, `https://`, `hf://`, `file://`), optionally
    pinned with `@sha256:<hex>`."""

    name: str
    source: str
    runtime: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _path_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "path" in data and "source" not in data:
            data = {**data, "source": str(data.pop("path"))}
        return data

    @property
    def is_remote(self) -> bool:
        if self.source.startswith(("models:/", "runs:/")):  # MLflow's one-slash URIs
            return True
        return "://" in self.source and not self.source.startswith("file://")

    @property
    def path(self) -> Path:
        return Path(self.source.removeprefix("file://"))

    @classmethod
    def parse(cls, text: str) -> ModelRef:
        name, sep, rest = text.partition("=")
        if not sep or not name or not rest:
            raise ValueError(f"--model {text!r} must look like NAME=SOURCE[:runtime]")
        source, runtime = rest, None
        head, colon, tail = rest.rpartition(":")
        # A trailing ":word" names the runtime, unless it is part of the URI: the scheme's
        # "://", or the hex of an "@sha256:<hex>" pin.
        if colon and head and _RUNTIME_NAME.fullmatch(tail) and not _HEX64.fullmatch(tail):
            source, runtime = head, tail
        return cls(name=name, source=source, runtime=runtime)


_RUNTIME_NAME = re.compile(r"[a-z][a-z0-9_]*")
_HEX64 = re.compile(r"[0-9a-f]{64}")


class ServerSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PODSERVE_", extra="forbid", frozen=True, validate_default=True
    )

    host: str = Field("127.0.0.1", description="HTTP listen address.")
    port: int = Field(
        8000,
        ge=0,
        le=65535,
        description="HTTP port (OIP v2, OpenAI, probes, /metrics); 0 picks a free one.",
    )
    grpc_port: int = Field(
        8001, ge=-1, le=65535, description="gRPC port; -1 turns gRPC off, 0 picks a free one."
    )
    model_repository: Path | None = Field(
        None, description="Directory of models, one sub-directory with a model.yaml each."
    )
    models: Annotated[list[ModelRef], NoDecode] = Field(
        default_factory=list,
        description="Extra models as NAME=PATH[:runtime] (PATH is a model directory or file). "
        "In the environment: comma-separated.",
    )
    max_queue: int = Field(
        256, ge=1, description="Admitted-but-waiting requests per model before 503."
    )
    max_body_bytes: int = Field(
        64 * 1024 * 1024, ge=1024, description="Largest request body accepted before 413."
    )
    max_shm_regions: int | None = Field(
        None,
        ge=1,
        description="Shared-memory regions registered at once (each holds a file descriptor "
        "and a mapping); default 1024, or a quarter of the descriptor limit when lower.",
    )
    ready_high_watermark: float = Field(
        0.9,
        gt=0,
        le=1,
        description="Readiness fails when a queue is fuller than this fraction of max_queue.",
    )
    ready_low_watermark: float = Field(
        0.5,
        ge=0,
        lt=1,
        description="Readiness recovers when every queue is back below this fraction.",
    )
    drain_timeout_s: float = Field(
        25.0, ge=0, description="Longest drain after SIGTERM before in-flight requests are cut."
    )
    load_stall_timeout_s: float = Field(
        600.0, gt=0, description="Liveness fails if model loading makes no progress for this long."
    )
    default_timeout_s: float | None = Field(
        None, gt=0, description="Deadline for requests that carry none (none by default)."
    )
    gil_switch_interval_ms: float = Field(
        0.5,
        gt=0,
        le=100,
        description="How long a Python thread may hold the GIL while another waits for it "
        "(CPython's switch interval; its default is 5 ms). A model thread that releases the "
        "GIL for compute needs it back briefly between calls; waiting up to 5 ms behind a "
        "busy event loop cost heavy-mlp 8 percent of its throughput (docs/benchmarks.md).",
    )
    cache_dir: Path = Field(Path("/cache"), description="Model cache directory.")
    log_format: Literal["json", "console"] = Field("json", description="Log line format.")
    log_level: str = Field("INFO", description="Log level (DEBUG, INFO, WARNING, ERROR).")
    autoload: bool = Field(
        False,
        description="Load a known but unloaded model on its first request (multi-model "
        "serving); concurrent first requests share one load.",
    )
    model_control_mode: Literal["none", "explicit"] = Field(
        "none",
        description="Triton's model-control mode: `none` loads the repository at startup "
        "and refuses the repository API's load and unload (400); `explicit` allows them.",
    )
    admin_token: str | None = Field(
        None,
        description="When set, repository load and unload need `Authorization: Bearer "
        "<token>` (gRPC: `authorization` metadata); prefer the environment variable to "
        "the flag, which other users of the host can read.",
    )
    memory_budget_bytes: int | None = Field(
        None,
        ge=1,
        description="Memory the loaded models may use together; to load another, the least "
        "recently used idle model is unloaded. Each model counts its `memory_bytes`, "
        "else the size of its files.",
    )
    max_concurrent_sequences: int | None = Field(
        None,
        ge=1,
        description="Default `max_num_seqs` of generative models (a model.yaml parameter "
        "wins): sequences decoded together.",
    )
    max_context_tokens: int | None = Field(
        None,
        ge=16,
        description="Default cap on prompt + max_tokens for generative models (a model.yaml "
        "`max_context_tokens` wins); never above the model's own context.",
    )
    payload_log_sample_rate: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Fraction of inference request/response pairs logged for drift "
        "monitoring (0 turns payload logging off).",
    )
    payload_log_file: Path | None = Field(
        None, description="JSONL file (rotated by size) that receives payload CloudEvents."
    )
    payload_log_file_max_bytes: int = Field(
        100 * 1024 * 1024, ge=1024, description="Size at which the payload log file rotates."
    )
    payload_log_url: str | None = Field(
        None, description="HTTP endpoint that receives payload CloudEvents (batched mode)."
    )
    payload_log_redact: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Fields whose values are replaced by [REDACTED] in payload logs, "
        "case-insensitive, in tensor names, request parameters at any depth and JSON records "
        "inside BYTES tensors: a name (`ssn`: that key at any depth), a dotted path from the "
        "root (`customer.ssn`; list elements add no segment), globs (`*token*`, `*.card.number`) "
        "or `re:<regex>` searched in the dotted path. In the environment: comma-separated.",
    )
    payload_log_buffer_records: int = Field(
        1024,
        ge=1,
        description="Payload records buffered for the writer; when full, new records are "
        "dropped and counted, never waited for.",
    )
    access_log_sample_rate: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Fraction of requests that get an access-log line (0 turns them off).",
    )
    # HTTP connection bounds (httpedge/limits.py). Defaults follow common front ends: nginx's
    # large_client_header_buffers (4 x 8 KB) and keepalive_timeout (75 s, longer than
    # the 60 s idle timeout of cloud load balancers, which must close first).
    max_header_bytes: int = Field(
        32 * 1024,
        ge=1024,
        description="Largest request line plus headers accepted on one HTTP request; "
        "more is answered 431 and the connection closed.",
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Time a client has to send a request's complete headers, from the "
        "connection (or the request's first byte); then 408 and the connection closed.",
    )
    body_timeout_s: float = Field(
        60.0,
        gt=0,
        description="Time a request's whole body has to arrive once part of it has come "
        "without the rest (a body sent with its headers never starts the clock); then 408 "
        "and the connection closed. 64 MiB in 60 s is 1.1 MB/s.",
    )
    keep_alive_timeout_s: int = Field(
        75,
        gt=0,
        description="Idle time after which a keep-alive HTTP connection is closed.",
    )
    max_connections: int = Field(
        4096,
        ge=1,
        description="Open HTTP connections at most; one more is answered 503 (JSON, "
        "Retry-After) and closed before anything is read from it.",
    )
    # gRPC connection bounds (server/grpc/limits.py), aligned with the HTTP ones above;
    # a gRPC connection sending nothing is closed after `header_timeout_s` as well.
    grpc_max_connections: int = Field(
        4096,
        ge=1,
        description="Open gRPC connections at most (at most a quarter of the process's "
        "descriptor limit); one more is closed as soon as it is accepted, and the client "
        "sees UNAVAILABLE.",
    )
    grpc_idle_timeout_s: float = Field(
        75.0,
        gt=0,
        description="Time a gRPC connection may have no call open before the server sends "
        "GOAWAY and closes it; clients reconnect on their next call.",
    )
    grpc_max_concurrent_streams: int = Field(
        256,
        ge=1,
        description="Calls open at once on one gRPC connection (HTTP/2 "
        "SETTINGS_MAX_CONCURRENT_STREAMS); a client past it waits for a stream.",
    )
    grpc_max_concurrent_rpcs: int = Field(
        4096,
        ge=1,
        description="gRPC calls open at once on the server, an open ModelStreamInfer "
        "stream counting one; one more is answered RESOURCE_EXHAUSTED.",
    )

    @field_validator("models", mode="before")
    @classmethod
    def _parse_models(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        if isinstance(value, list):
            return [ModelRef.parse(v) if isinstance(v, str) else v for v in value]
        return value

    @field_validator("payload_log_redact", mode="before")
    @classmethod
    def _split_names(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        for pattern in value if isinstance(value, list) else ():
            if isinstance(pattern, str) and pattern.strip().startswith("re:"):
                try:  # fail at startup, not on the payload writer thread
                    re.compile(pattern.strip()[3:])
                except re.error as exc:
                    raise ValueError(f"redaction pattern {pattern!r}: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _watermarks_ordered(self) -> ServerSettings:
        if self.ready_low_watermark >= self.ready_high_watermark:
            raise ValueError("ready_low_watermark must be below ready_high_watermark")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        yaml_file = _SETTINGS_FILE.get("path")
        if yaml_file is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file))
        return tuple(sources)

    @classmethod
    def build(cls, flags: dict[str, Any], settings_file: Path | None) -> ServerSettings:
        """flags > PODSERVE_* env > settings file > defaults."""
        _SETTINGS_FILE["path"] = settings_file
        try:
            return cls(**flags)
        finally:
            _SETTINGS_FILE.pop("path", None)


# pydantic-settings asks for sources through a classmethod with a fixed signature; the
# file chosen on the command line reaches it through this one-slot registry.
_SETTINGS_FILE: dict[str, Path | None] = {}
