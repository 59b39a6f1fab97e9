from __future__ import annotations

from pathlib import Path

import pytest

from podserve.storage import (
    DigestMismatch,
    ModelNotFoundAtSource,
    ensure_local,
    fetch_model,
    release_local,
)
from tests.storage.support import expected_digest, write_model

FILES = {"a.txt": b"alpha", "sub/b.bin": b"\x00\x01" * 1000}


def test_local_path_without_digest_is_served_in_place(tmp_path: Path) -> None:
    root = write_model(tmp_path / "m", FILES)
    cache = tmp_path / "cache"
    assert ensure_local(str(root), digest=None, cache_dir=cache) == root
    assert not cache.exists()  # no copy, not even a cache directory


def test_local_path_with_digest_is_verified_in_place(tmp_path: Path) -> None:
    root = write_model(tmp_path / "m", FILES)
    result = fetch_model(
        f"file://{root}", digest=expected_digest(FILES), cache_dir=tmp_path / "cache"
    )
    assert result.path == root
    assert str(result.digest) == expected_digest(FILES)
    (root / "a.txt").write_bytes(b"alphA")
    with pytest.raises(DigestMismatch) as info:
        ensure_local(str(root), digest=expected_digest(FILES), cache_dir=tmp_path / "cache")
    assert info.value.expected == expected_digest(FILES)
    assert info.value.actual == expected_digest(dict(FILES, **{"a.txt": b"alphA"}))


def test_missing_local_path_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundAtSource):
        ensure_local(str(tmp_path / "nope"), digest=None, cache_dir=tmp_path / "cache")


def test_copy_local_publishes_a_verified_copy(tmp_path: Path) -> None:
    root = write_model(tmp_path / "m", FILES)
    cache = tmp_path / "cache"
    path = ensure_local(str(root), digest=expected_digest(FILES), cache_dir=cache, copy_local=True)
    try:
        assert path.parent == cache / "entries"
        assert path.name == "sha256-" + expected_digest(FILES).split(":")[1]
        assert (path / "sub" / "b.bin").read_bytes() == FILES["sub/b.bin"]
        assert (cache / "entries" / f"{path.name}.manifest.json").is_file()
        assert list((cache / "tmp").iterdir()) == []  # staging cleaned after publish
    finally:
        release_local(path)
