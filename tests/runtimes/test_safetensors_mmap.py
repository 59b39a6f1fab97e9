"""Zero-copy safetensors loading: every dtype and shape comes back equal to what was
saved, the file is never written through the mapping, and bad files are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from podserve.core.errors import ModelLoadFailed
from podserve.runtimes.safetensors_mmap import mmap_state_dict

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")


def test_round_trip_of_every_dtype(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(0)
    saved = {
        "f32": torch.randn(3, 5, generator=generator),
        "f64": torch.randn(7, generator=generator, dtype=torch.float64),
        "f16": torch.randn(2, 2, generator=generator).half(),
        "bf16": torch.randn(4, generator=generator).bfloat16(),
        "i64": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "i8": torch.tensor([-128, 0, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False]),
        "empty": torch.empty(0, 4),
        "scalar": torch.tensor(3.5),
    }
    path = tmp_path / "w.safetensors"
    safetensors_torch.save_file(saved, str(path))
    before = path.read_bytes()
    state, mapping = mmap_state_dict(torch, path)
    assert set(state) == set(saved)
    for name, tensor in saved.items():
        assert state[name].dtype == tensor.dtype, name
        assert state[name].shape == tensor.shape, name
        assert torch.equal(state[name], tensor), name
    # Private mapping: writing to a weight never reaches the file.
    state["f32"].fill_(42.0)
    assert path.read_bytes() == before
    del state
    del mapping


def test_bad_files_are_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.safetensors"
    empty.write_bytes(b"")
    with pytest.raises(ModelLoadFailed, match="not a safetensors file"):
        mmap_state_dict(torch, empty)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\xff" * 64)
    with pytest.raises(ModelLoadFailed, match="not a valid safetensors file"):
        mmap_state_dict(torch, garbage)
    path = tmp_path / "ok.safetensors"
    safetensors_torch.save_file({"w": torch.ones(1000)}, str(path))
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ModelLoadFailed, match="offsets do not match"):
        mmap_state_dict(torch, truncated)
