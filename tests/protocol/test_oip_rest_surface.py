"""The public surface of protocol.v2 and its import boundary (protocol imports only
podserve.core, numpy, orjson and the standard library)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import podserve.protocol
import podserve.protocol.v2 as v2
from podserve.core.errors import InvalidInput
from podserve.protocol.v2 import decode_repository_index_request

EXPECTED = {
    "INFERENCE_HEADER_CONTENT_LENGTH",
    "ModelMetadataLike",
    "RepositoryEntryLike",
    "ServerMetadataLike",
    "binary_output_names",
    "decode_infer_request",
    "decode_repository_index_request",
    "encode_error",
    "encode_infer_response",
    "encode_model_metadata",
    "encode_repository_index",
    "encode_server_metadata",
    "parse_header_length",
}


def test_public_surface_is_sorted_and_intended() -> None:
    assert v2.__all__ == sorted(v2.__all__)
    assert set(v2.__all__) == EXPECTED
    assert all(hasattr(v2, name) for name in v2.__all__)


def _imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_protocol_imports_only_core_numpy_orjson_pydantic_and_stdlib() -> None:
    root = Path(podserve.protocol.__file__).parent
    files = sorted(root.rglob("*.py"))
    assert len(files) >= 5
    for path in files:
        for module in _imported_modules(path):
            top = module.split(".")[0]
            allowed = (
                top in sys.stdlib_module_names
                or top in {"numpy", "orjson"}
                # Wire schemas at the edge may be pydantic models (STYLE.md rule 3), and
                # raise pydantic-core's own errors (PydanticCustomError, json_body.py).
                or top in {"pydantic", "pydantic_core"}
                or module.startswith(("podserve.core", "podserve.protocol"))
                # The shared-memory region table tensors are read from: core only below it.
                or module.startswith("podserve.shm")
            )
            assert allowed, f"{path.name} imports {module}"


def test_repository_index_request() -> None:
    assert decode_repository_index_request(b"") is False
    assert decode_repository_index_request(b"{}") is False
    assert decode_repository_index_request(b'{"ready": true}') is True
    with pytest.raises(InvalidInput, match="'ready' must be a boolean"):
        decode_repository_index_request(b'{"ready": "yes"}')
