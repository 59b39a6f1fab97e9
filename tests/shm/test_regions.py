"""The region table: register, status, bounds-checked views, unregister and shutdown,
on real files mapped with mmap (a temporary directory stands in for /dev/shm, and one
test uses the real /dev/shm through Python's own shared-memory module, which is what
tritonclient.utils.shared_memory creates regions with). Whether a mapping is really gone
is read from the kernel's /proc/self/maps."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np
import pytest

from podserve.core.errors import AlreadyExists, InvalidInput, NotFound
from podserve.shm import CudaSharedMemory, RegionStatus, SystemSharedMemory


def _object(directory: Path, name: str, size: int) -> Path:
    path = directory / name
    path.write_bytes(bytes(range(256)) * (size // 256) + bytes(size % 256))
    return path


def _mapped(path: Path) -> bool:
    return str(path) in Path("/proc/self/maps").read_text()


@pytest.fixture
def table(tmp_path: Path) -> Iterator[SystemSharedMemory]:
    table = SystemSharedMemory(tmp_path)
    yield table
    table.close()


def test_register_then_status_lists_the_region(table: SystemSharedMemory, tmp_path: Path) -> None:
    _object(tmp_path, "in", 4096)
    table.register("b_region", "/in", 0, 64)
    table.register("a_region", "in", 128, 256)  # with or without the leading slash
    assert table.status() == [
        RegionStatus("a_region", "in", 128, 256),
        RegionStatus("b_region", "/in", 0, 64),
    ]
    assert table.status("b_region") == [RegionStatus("b_region", "/in", 0, 64)]


def test_view_reads_and_writes_the_object_in_place(
    table: SystemSharedMemory, tmp_path: Path
) -> None:
    path = _object(tmp_path, "data", 8192)
    # An offset that is not a page multiple: the window starts at byte 4100 of the file.
    table.register("r", "/data", 4100, 1000)
    view = table.view("r", 4, 8)
    assert bytes(view) == path.read_bytes()[4104:4112]
    view[:] = b"ABCDEFGH"
    del view
    assert path.read_bytes()[4104:4112] == b"ABCDEFGH"
    # A numpy array over a view is the region itself, no copy.
    array = np.frombuffer(table.view("r", 0, 16), dtype=np.uint8)
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, b"\x07", 4100)
    os.close(fd)
    assert array[0] == 7


def test_views_are_bounds_checked_against_the_registered_size(
    table: SystemSharedMemory, tmp_path: Path
) -> None:
    _object(tmp_path, "data", 4096)
    table.register("r", "/data", 0, 100)
    assert len(table.view("r", 0, 100)) == 100
    assert len(table.view("r", 99, 1)) == 1
    with pytest.raises(InvalidInput, match=r"offset \+ byte size .*'r': 90 \+ 11 exceeds"):
        table.view("r", 90, 11)
    with pytest.raises(InvalidInput, match="Invalid offset for shared memory region: 'r'"):
        table.view("r", 100, 0)
    with pytest.raises(InvalidInput, match="shared_memory_offset"):
        table.view("r", -1, 4)
    with pytest.raises(NotFound, match="Unable to find shared memory region: 'nope'"):
        table.view("nope", 0, 4)


def test_register_refuses_windows_past_the_end_of_the_object(
    table: SystemSharedMemory, tmp_path: Path
) -> None:
    _object(tmp_path, "small", 64)
    with pytest.raises(InvalidInput, match="offset 32 \\+ byte_size 64 exceeds the 64 bytes"):
        table.register("r", "/small", 32, 64)
    with pytest.raises(InvalidInput, match="byte_size"):
        table.register("r", "/small", 0, 0)
    with pytest.raises(InvalidInput, match="offset"):
        table.register("r", "/small", True, 8)  # a JSON bool (an int to Python)
    assert table.status() == []


def test_duplicate_names_are_refused_and_the_first_stays(
    table: SystemSharedMemory, tmp_path: Path
) -> None:
    _object(tmp_path, "a", 4096)
    table.register("r", "/a", 0, 16)
    with pytest.raises(AlreadyExists, match="shared memory region 'r' already in manager"):
        table.register("r", "/a", 16, 16)
    assert table.status("r") == [RegionStatus("r", "/a", 0, 16)]


@pytest.mark.parametrize("key", ["/../etc/passwd", "/a/b", "..", "/", "", "/x\0y", "a" * 256])
def test_keys_cannot_leave_the_shared_memory_directory(table: SystemSharedMemory, key: str) -> None:
    with pytest.raises(InvalidInput):
        table.register("r", key, 0, 8)


def test_missing_objects_symlinks_and_directories_are_refused(
    table: SystemSharedMemory, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput, match="Unable to open shared memory region: '/missing'"):
        table.register("r", "/missing", 0, 8)
    target = _object(tmp_path.parent, f"{tmp_path.name}-outside", 4096)
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(InvalidInput, match="Unable to open shared memory region: '/link'"):
        table.register("r", "/link", 0, 8)
    (tmp_path / "dir").mkdir()
    with pytest.raises(InvalidInput):
        table.register("r", "/dir", 0, 8)


def test_unregister_unmaps_and_forgets(table: SystemSharedMemory, tmp_path: Path) -> None:
    path = _object(tmp_path, "obj", 4096)
    table.register("r", "/obj", 0, 64)
    assert _mapped(path)
    table.unregister("r")
    assert not _mapped(path)
    assert table.status() == []
    with pytest.raises(NotFound, match="Unable to find system shared memory region: 'r'"):
        table.status("r")
    table.unregister("r")  # not registered: a no-op, as in Triton
    table.register("r", "/obj", 0, 64)  # the name is free again
    assert table.status("r") == [RegionStatus("r", "/obj", 0, 64)]


def test_a_region_in_use_stays_mapped_until_its_last_view_goes(
    table: SystemSharedMemory, tmp_path: Path
) -> None:
    path = _object(tmp_path, "busy", 4096)
    table.register("r", "/busy", 0, 64)
    in_flight = np.frombuffer(table.view("r", 0, 8), dtype=np.int32)
    table.unregister("r")
    assert table.status() == []  # forgotten at once...
    assert _mapped(path)  # ...but the request still reads valid memory
    assert table.retiring == 1
    assert in_flight.tolist() == np.frombuffer(path.read_bytes()[:8], np.int32).tolist()
    del in_flight
    gc.collect()
    assert table.retiring == 0  # the next look at the table unmaps it
    assert not _mapped(path)


def test_close_unregisters_everything(table: SystemSharedMemory, tmp_path: Path) -> None:
    paths = [_object(tmp_path, f"o{i}", 4096) for i in range(3)]
    for i in range(3):
        table.register(f"r{i}", f"/o{i}", 0, 32)
    table.close()
    assert table.status() == []
    assert not any(_mapped(p) for p in paths)


def test_regions_tritonclient_style_in_dev_shm() -> None:
    # tritonclient.utils.shared_memory creates "/key" with multiprocessing's SharedMemory.
    created = shared_memory.SharedMemory(create=True, size=256)
    try:
        table = SystemSharedMemory()
        table.register("input", "/" + created.name, 0, 256)
        buf = created.buf
        assert buf is not None  # None only after close()
        np.frombuffer(buf, dtype=np.int32)[:4] = [1, 2, 3, 4]
        assert np.frombuffer(table.view("input", 0, 16), dtype=np.int32).tolist() == [1, 2, 3, 4]
        table.view("input", 16, 4)[:] = np.int32(42).tobytes()
        assert int(np.frombuffer(buf, dtype=np.int32)[4]) == 42
        table.close()
    finally:
        created.close()
        created.unlink()


def test_cuda_shared_memory_answers_as_triton_without_gpus(
    table: SystemSharedMemory, tmp_path: Path
) -> None:
    cuda = CudaSharedMemory(table)
    with pytest.raises(InvalidInput, match="failed to register CUDA shared memory region: 'g'"):
        cuda.register("g")
    with pytest.raises(InvalidInput, match="'region name' is necessary"):
        cuda.register("")
    cuda.unregister("g")
    cuda.unregister()
    assert cuda.status() == []
    with pytest.raises(NotFound, match="Unable to find cuda shared memory region: 'g'"):
        cuda.status("g")
    _object(tmp_path, "sys", 4096)
    table.register("sys", "/sys", 0, 8)
    with pytest.raises(NotFound, match="registered as system shared memory, not CUDA"):
        cuda.status("sys")


def test_an_object_shrunk_after_registration_is_refused_not_read(
    table: SystemSharedMemory, tmp_path: Path
) -> None:
    # Reading a mapped page past the end of its file is SIGBUS: it must never happen.
    path = _object(tmp_path, "shrinks", 8192)
    table.register("r", "/shrinks", 4096, 4096)
    assert len(table.view("r", 0, 16)) == 16
    os.truncate(path, 4096)
    with pytest.raises(InvalidInput, match="'/shrinks' shrank to 4096 bytes, below the 8192"):
        table.view("r", 0, 16)
    table.unregister("r")
