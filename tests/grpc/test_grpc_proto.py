"""The .proto, the committed generated code and tritonclient agree."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc import model_config_pb2 as triton_config_pb
from tritonclient.grpc import service_pb2 as triton_pb

from podserve.server.grpc._generated import inference_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]


def _load_gen_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_grpc", ROOT / "scripts" / "gen_grpc.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_grpc", module)
    spec.loader.exec_module(module)
    return module


def test_committed_generated_code_matches_the_proto() -> None:
    gen = _load_gen_script()
    assert gen.drift(gen.render()) == [], "run: python scripts/gen_grpc.py"


def test_drift_detects_a_changed_file(tmp_path: Path) -> None:
    # The check above is only worth something if drift() can see a difference.
    gen = _load_gen_script()
    files = gen.render()
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert gen.drift(files, tmp_path) == []
    (tmp_path / "inference_pb2.py").write_text("# edited\n", encoding="utf-8")
    (tmp_path / "stray.py").write_text("", encoding="utf-8")
    assert gen.drift(files, tmp_path) == ["inference_pb2.py", "stray.py"]


def _field_signature(field: FieldDescriptor) -> tuple[object, ...]:
    return (
        field.number,
        field.type,
        field.is_repeated,
        field.message_type.full_name if field.message_type else None,
        field.enum_type.full_name if field.enum_type else None,
        field.containing_oneof.name if field.containing_oneof else None,
    )


def _assert_wire_compatible(ours: Descriptor, theirs: Descriptor) -> None:
    their_fields = {f.name: f for f in theirs.fields}
    for field in ours.fields:
        assert field.name in their_fields, f"{ours.full_name}.{field.name} not in tritonclient"
        assert _field_signature(field) == _field_signature(their_fields[field.name]), (
            f"{ours.full_name}.{field.name} differs on the wire from tritonclient's"
        )
    their_nested = {n.name: n for n in theirs.nested_types}
    for nested in ours.nested_types:
        _assert_wire_compatible(nested, their_nested[nested.name])


def _theirs(name: str) -> Descriptor:
    # Triton keeps the model-configuration messages in model_config.proto
    for module in (triton_pb, triton_config_pb):
        if name in module.DESCRIPTOR.message_types_by_name:
            found: Descriptor = module.DESCRIPTOR.message_types_by_name[name]
            return found
    raise KeyError(f"tritonclient has no message {name!r}")


@pytest.mark.parametrize("name", sorted(pb.DESCRIPTOR.message_types_by_name))
def test_every_message_is_wire_compatible_with_tritonclient(name: str) -> None:
    _assert_wire_compatible(pb.DESCRIPTOR.message_types_by_name[name], _theirs(name))


@pytest.mark.parametrize("name", sorted(pb.DESCRIPTOR.enum_types_by_name))
def test_every_enum_has_tritonclients_values(name: str) -> None:
    ours = pb.DESCRIPTOR.enum_types_by_name[name]
    theirs = triton_config_pb.DESCRIPTOR.enum_types_by_name[name]
    assert {v.name: v.number for v in ours.values} == {v.name: v.number for v in theirs.values}
    for message in ("ModelInput", "ModelInstanceGroup"):
        for nested in pb.DESCRIPTOR.message_types_by_name[message].enum_types:
            their_nested = _theirs(message).enum_types_by_name[nested.name]
            assert [(v.name, v.number) for v in nested.values] == [
                (v.name, v.number) for v in their_nested.values
            ]


def test_every_method_has_tritonclients_path_and_types() -> None:
    ours = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    theirs = triton_pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert ours.full_name == theirs.full_name == "inference.GRPCInferenceService"
    their_methods = {m.name: m for m in theirs.methods}
    assert {m.name for m in ours.methods} == {
        "ServerLive",
        "ServerReady",
        "ModelReady",
        "ServerMetadata",
        "ModelMetadata",
        "ModelInfer",
        "ModelStreamInfer",
        "ModelConfig",
        "ModelStatistics",
        "RepositoryIndex",
        "RepositoryModelLoad",
        "RepositoryModelUnload",
        "SystemSharedMemoryStatus",
        "SystemSharedMemoryRegister",
        "SystemSharedMemoryUnregister",
        "CudaSharedMemoryStatus",
        "CudaSharedMemoryRegister",
        "CudaSharedMemoryUnregister",
    }
    for method in ours.methods:
        other = their_methods[method.name]
        assert method.input_type.full_name == other.input_type.full_name
        assert method.output_type.full_name == other.output_type.full_name
        streams = method.name == "ModelStreamInfer"
        assert method.server_streaming == other.server_streaming == streams
        assert method.client_streaming == other.client_streaming == streams


def test_messages_live_outside_the_default_pool() -> None:
    # tritonclient registers the same names in the default pool; importing both in one
    # process (as this test module does) only works because ours are private.
    assert pb.DESCRIPTOR.pool is not triton_pb.DESCRIPTOR.pool
