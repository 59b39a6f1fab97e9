"""Triton's model-configuration and statistics extensions as REST JSON bodies, in the
shape Triton's protobuf-to-JSON printing gives them (what `tritonclient.http`'s
`get_model_config` and `get_inference_statistics` return)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from podserve.core.tensors import Datatype, TensorSpec
from podserve.core.triton import Duration, ModelConfigView, ModelStatistics


def triton_datatype(datatype: Datatype) -> str:
    """Triton's model-config type name: TYPE_FP32, ..., TYPE_STRING for BYTES."""
    return "TYPE_STRING" if datatype is Datatype.BYTES else f"TYPE_{datatype.value}"


def config_dims(spec: TensorSpec, batches: bool) -> tuple[list[int], bool]:
    """A tensor's dims as Triton declares them: without the batch dimension when the model
    batches. A tensor that is only the batch dimension becomes [1] reshaped to [], as in
    Triton. Returns the dims and whether that reshape applies."""
    dims = list(spec.shape[1:] if batches and spec.shape else spec.shape)
    if batches and not dims:
        return [1], True
    return dims, False


def model_config_document(view: ModelConfigView) -> dict[str, Any]:
    batches = view.max_batch_size > 0

    def tensor(spec: TensorSpec, *, is_input: bool) -> dict[str, Any]:
        dims, reshaped = config_dims(spec, batches)
        doc: dict[str, Any] = {
            "name": spec.name,
            "data_type": triton_datatype(spec.datatype),
            "dims": dims,
        }
        if is_input:
            doc["format"] = "FORMAT_NONE"
        if reshaped:
            doc["reshape"] = {"shape": []}
        return doc

    doc: dict[str, Any] = {
        "name": view.name,
        "platform": view.platform,
        "backend": view.backend,
        "version_policy": {"latest": {"num_versions": 1}},
        "max_batch_size": view.max_batch_size,
        "input": [tensor(s, is_input=True) for s in view.inputs],
        "output": [tensor(s, is_input=False) for s in view.outputs],
        "instance_group": [{"name": view.name, "kind": "KIND_CPU", "count": view.instance_count}],
        "parameters": {k: {"string_value": v} for k, v in view.parameters.items()},
    }
    if view.dynamic_batching:
        doc["dynamic_batching"] = {
            "preferred_batch_size": list(view.preferred_batch_sizes),
            "max_queue_delay_microseconds": view.max_queue_delay_us,
        }
    return doc


def encode_model_config(view: ModelConfigView) -> bytes:
    """`GET /v2/models/{name}[/versions/{v}]/config`."""
    return orjson.dumps(model_config_document(view))


def _duration(d: Duration) -> dict[str, int]:
    return {"count": d.count, "ns": d.ns}


def encode_model_statistics(stats: Iterable[ModelStatistics]) -> bytes:
    """`GET /v2/models[/{name}[/versions/{v}]]/stats`."""
    zero = _duration(Duration())
    return orjson.dumps(
        {
            "model_stats": [
                {
                    "name": s.name,
                    "version": s.version,
                    "last_inference": s.last_inference_ms,
                    "inference_count": s.inference_count,
                    "execution_count": s.execution_count,
                    "inference_stats": {
                        "success": _duration(s.success),
                        "fail": _duration(s.fail),
                        "queue": _duration(s.queue),
                        "compute_input": _duration(s.compute_input),
                        "compute_infer": _duration(s.compute_infer),
                        "compute_output": _duration(s.compute_output),
                        "cache_hit": zero,
                        "cache_miss": zero,
                    },
                    "batch_stats": [
                        {
                            "batch_size": b.batch_size,
                            "compute_input": _duration(b.compute_input),
                            "compute_infer": _duration(b.compute_infer),
                            "compute_output": _duration(b.compute_output),
                        }
                        for b in s.batches
                    ],
                }
                for s in stats
            ]
        }
    )
