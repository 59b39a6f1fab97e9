"""Encode server metadata, model metadata and the repository index as v2 REST bodies.

protocol/ sits below dataplane/ in the import layers, so the encoders accept anything
shaped like the data plane's messages (structural protocols) instead of importing them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import orjson

from podserve.core.tensors import TensorSpec


class ServerMetadataLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def extensions(self) -> tuple[str, ...]: ...


class ModelMetadataLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def versions(self) -> tuple[str, ...]: ...
    @property
    def platform(self) -> str: ...
    @property
    def inputs(self) -> tuple[TensorSpec, ...]: ...
    @property
    def outputs(self) -> tuple[TensorSpec, ...]: ...


class RepositoryEntryLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def reason(self) -> str: ...


def encode_server_metadata(metadata: ServerMetadataLike) -> bytes:
    """`GET /v2`: `{"name", "version", "extensions"}`."""
    return orjson.dumps(
        {
            "name": metadata.name,
            "version": metadata.version,
            "extensions": list(metadata.extensions),
        }
    )


def encode_model_metadata(metadata: ModelMetadataLike) -> bytes:
    """`GET /v2/models/{name}[/versions/{v}]`; `versions` is left out when there are none,
    as the spec asks of servers or models without versions."""
    doc: dict[str, Any] = {"name": metadata.name}
    if metadata.versions:
        doc["versions"] = list(metadata.versions)
    doc["platform"] = metadata.platform
    doc["inputs"] = [_tensor_spec(spec) for spec in metadata.inputs]
    doc["outputs"] = [_tensor_spec(spec) for spec in metadata.outputs]
    return orjson.dumps(doc)


def encode_repository_index(entries: Iterable[RepositoryEntryLike]) -> bytes:
    """`POST /v2/repository/index`: a JSON array of `{"name", "version", "state",
    "reason"}`, with the optional `version` and `reason` left out when empty (as Triton
    does, whose client returns this array as is)."""
    index: list[dict[str, str]] = []
    for entry in entries:
        item = {"name": entry.name}
        if entry.version:
            item["version"] = entry.version
        item["state"] = entry.state
        if entry.reason:
            item["reason"] = entry.reason
        index.append(item)
    return orjson.dumps(index)


def _tensor_spec(spec: TensorSpec) -> dict[str, Any]:
    return {"name": spec.name, "datatype": spec.datatype.value, "shape": list(spec.shape)}
