"""Tensors read from and written to registered regions (protocol/v2/shared_memory.py),
on real mapped files, checked byte for byte against what tritonclient's own helpers
(tritonclient.utils.serialize_byte_tensor) put on the wire."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

from podserve.core.errors import InvalidInput, NotFound
from podserve.core.tensors import Datatype, InferRequest, InferResponse, RequestedOutput, Tensor
from podserve.protocol.v2.shared_memory import (
    check_output,
    decode_system_register,
    in_shared_memory,
    owned,
    read_input,
    write_outputs,
)
from podserve.shm import RegionRef, SystemSharedMemory, region_ref


@pytest.fixture
def table(tmp_path: Path) -> Iterator[SystemSharedMemory]:
    (tmp_path / "obj").write_bytes(bytes(4096))
    table = SystemSharedMemory(tmp_path)
    table.register("r", "/obj", 0, 4096)
    yield table
    table.close()


def _put(tmp_path: Path, offset: int, data: bytes) -> None:
    with (tmp_path / "obj").open("r+b") as f:
        f.seek(offset)
        f.write(data)


def test_fixed_size_inputs_are_read_only_views_of_the_region(
    table: SystemSharedMemory, tmp_path: Path
) -> None:
    values = np.arange(32, dtype=np.int32).reshape(2, 16)
    _put(tmp_path, 64, values.tobytes())
    array = read_input(table, "INPUT0", Datatype.INT32, (2, 16), RegionRef("r", 64, 128))
    np.testing.assert_array_equal(array, values)
    assert not array.flags.writeable
    assert not array.flags.owndata  # no copy: the region itself
    _put(tmp_path, 64, np.int32(99).tobytes())
    assert array[0, 0] == 99


def test_misaligned_inputs_are_copied_and_still_exact(
    table: SystemSharedMemory, tmp_path: Path
) -> None:
    values = np.linspace(0, 1, 8, dtype=np.float32)
    _put(tmp_path, 3, values.tobytes())
    array = read_input(table, "x", Datatype.FP32, (8,), RegionRef("r", 3, 32))
    np.testing.assert_array_equal(array, values)
    assert array.flags.aligned


def test_bool_and_bytes_inputs(table: SystemSharedMemory, tmp_path: Path) -> None:
    _put(tmp_path, 0, bytes([0, 1, 1]))
    flags = read_input(table, "b", Datatype.BOOL, (3,), RegionRef("r", 0, 3))
    assert flags.tolist() == [False, True, True]
    _put(tmp_path, 8, bytes([2]))
    with pytest.raises(InvalidInput, match="other than 0 or 1"):
        read_input(table, "b", Datatype.BOOL, (1,), RegionRef("r", 8, 1))
    strings = np.array([[b"7", b"-3", b""]], dtype=object)
    wire = serialize_byte_tensor(strings).item()
    _put(tmp_path, 100, wire)
    got = read_input(table, "s", Datatype.BYTES, (1, 3), RegionRef("r", 100, len(wire)))
    assert got.tolist() == strings.tolist()


def test_input_sizes_must_match_the_shape(table: SystemSharedMemory) -> None:
    with pytest.raises(InvalidInput, match=r"needs 64 bytes, shared_memory_byte_size gives 60"):
        read_input(table, "x", Datatype.INT32, (1, 16), RegionRef("r", 0, 60))
    with pytest.raises(InvalidInput, match="Invalid offset \\+ byte size"):
        read_input(table, "x", Datatype.INT32, (1, 16), RegionRef("r", 4090, 64))
    with pytest.raises(NotFound, match="Unable to find shared memory region: 'gone'"):
        read_input(table, "x", Datatype.INT32, (1, 16), RegionRef("gone", 0, 64))


def _request(*outputs: RequestedOutput) -> InferRequest:
    return InferRequest(model_name="simple", inputs=(), outputs=outputs)


def _shm(name: str, offset: int, byte_size: int, region: str = "r") -> RequestedOutput:
    ref = RegionRef(region, offset, byte_size)
    return RequestedOutput(name, parameters=ref.as_parameters())


def test_outputs_are_written_into_their_regions(table: SystemSharedMemory, tmp_path: Path) -> None:
    total = np.arange(16, dtype=np.int32).reshape(1, 16)
    text = np.array([[b"12", b"-1"]], dtype=object)
    response = InferResponse(
        model_name="simple",
        outputs=(
            Tensor("OUTPUT0", Datatype.INT32, total),
            Tensor("OUTPUT1", Datatype.BYTES, text),
            Tensor("OTHER", Datatype.INT32, total),
        ),
    )
    request = _request(_shm("OUTPUT0", 256, 64), _shm("OUTPUT1", 512, 100), RequestedOutput("X"))
    written = write_outputs(table, request, response)
    data = (tmp_path / "obj").read_bytes()
    assert np.frombuffer(data[256:320], dtype=np.int32).tolist() == total.ravel().tolist()
    wire = serialize_byte_tensor(text).item()
    assert data[512 : 512 + len(wire)] == wire
    assert deserialize_bytes_tensor(data[512 : 512 + len(wire)]).tolist() == [b"12", b"-1"]
    assert [in_shared_memory(t) for t in written.outputs] == [True, True, False]
    assert region_ref(written.outputs[0].parameters, "o") == RegionRef("r", 256, 64)


def test_an_output_region_too_small_is_the_clients_error(table: SystemSharedMemory) -> None:
    response = InferResponse(
        model_name="simple",
        outputs=(Tensor("OUTPUT0", Datatype.INT32, np.zeros((1, 16), np.int32)),),
    )
    with pytest.raises(InvalidInput, match=r"\(32 bytes\) should be at least 64 bytes"):
        write_outputs(table, _request(_shm("OUTPUT0", 0, 32)), response)


def test_output_regions_are_checked_before_compute(table: SystemSharedMemory) -> None:
    check_output(table, RegionRef("r", 0, 4096))
    with pytest.raises(NotFound):
        check_output(table, RegionRef("nope", 0, 4))
    with pytest.raises(InvalidInput):
        check_output(table, RegionRef("r", 4000, 200))


def test_register_bodies() -> None:
    body = decode_system_register(b'{"key": "/in", "offset": 0, "byte_size": 64}')
    assert (body.key, body.offset, body.byte_size) == ("/in", 0, 64)
    assert decode_system_register(b'{"key": "/in", "byte_size": 8}').offset == 0
    for bad in (
        b'{"offset": 0, "byte_size": 64}',
        b'{"key": "/in", "offset": -1, "byte_size": 64}',
        b'{"key": "/in", "byte_size": "64"}',
        b'{"key": "/in", "byte_size": 0}',
        b"[1]",
        b"not json",
    ):
        with pytest.raises(InvalidInput):
            decode_system_register(bad)


def test_references_in_parameters() -> None:
    assert region_ref({"binary_data": True}, "input 'x'") is None
    params = {"shared_memory_region": "r", "shared_memory_byte_size": 64}
    assert region_ref(params, "input 'x'") == RegionRef("r", 0, 64)
    for bad in (
        {"shared_memory_byte_size": 64},
        {"shared_memory_region": "r"},
        {"shared_memory_region": "", "shared_memory_byte_size": 4},
        {"shared_memory_region": "r", "shared_memory_byte_size": -4},
        {"shared_memory_region": "r", "shared_memory_byte_size": 4, "shared_memory_offset": 1.5},
    ):
        with pytest.raises(InvalidInput, match="input 'x'"):
            region_ref(bad, "input 'x'")


def test_what_outlives_the_request_gets_a_copy(table: SystemSharedMemory, tmp_path: Path) -> None:
    values = np.arange(16, dtype=np.int32)
    _put(tmp_path, 0, values.tobytes())
    in_place = read_input(table, "INPUT0", Datatype.INT32, (1, 16), RegionRef("r", 0, 64))
    sent = Tensor("INPUT1", Datatype.INT32, np.ones((1, 16), np.int32))
    request = InferRequest(
        model_name="simple", inputs=(Tensor("INPUT0", Datatype.INT32, in_place), sent)
    )
    kept = owned(request)
    _put(tmp_path, 0, bytes(64))  # the client reuses its region for the next request
    assert kept.inputs[0].data.tolist() == [values.tolist()]
    assert kept.inputs[1] is sent  # not in a region: left alone
    plain = InferRequest(model_name="simple", inputs=(sent,))
    assert owned(plain) is plain
