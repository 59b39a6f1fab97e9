"""The object-store core (fetchers/object_store.py) on an in-memory store: which objects a
key selects, and how the resumable copy keeps, restarts or refuses a partial. The s3, gs
and Azure Blob tests run the same code against real servers; these pin its edges."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from podserve.storage.errors import FetchNetworkError, ModelNotFoundAtSource, StorageError
from podserve.storage.fetchers.base import StagingArea
from podserve.storage.fetchers.object_store import (
    Listed,
    ObjectSink,
    StoredObject,
    copy_object,
    select_objects,
)
from podserve.storage.progress import NullProgress

STORE = {
    "m/config.json": Listed("m/config.json", 4, "v1"),
    "m/w/a.bin": Listed("m/w/a.bin", 3, "v1"),
    "m/w/": Listed("m/w/", 0, "v1"),  # a folder marker
    "other/x": Listed("other/x", 1, "v1"),
}


def _select(key: str) -> list[StoredObject]:
    def list_under(prefix: str) -> Iterable[Listed]:
        return [item for name, item in STORE.items() if name.startswith(prefix)]

    def missing(prefix: str) -> StorageError:
        return ModelNotFoundAtSource(f"nothing under {prefix!r}")

    return select_objects(key, head=STORE.get, list_under=list_under, missing=missing)


def test_a_key_naming_an_object_selects_it_alone() -> None:
    assert _select("m/w/a.bin") == [StoredObject("m/w/a.bin", "a.bin", 3, "v1")]


def test_a_prefix_selects_what_is_under_it_without_folder_markers() -> None:
    assert [o.rel for o in _select("m")] == ["config.json", "w/a.bin"]
    assert [o.rel for o in _select("")] == ["m/config.json", "m/w/a.bin", "other/x"]


def test_nothing_at_or_under_a_key_is_the_backends_not_found() -> None:
    with pytest.raises(ModelNotFoundAtSource, match="nothing under 'nope/'"):
        _select("nope")


class _Store:
    """One object's bytes; `reads` records each read's offset; `cut` ends a read early."""

    def __init__(self, data: bytes, cut: int | None = None) -> None:
        self.data = data
        self.cut = cut
        self.reads: list[int] = []

    def read(self, obj: StoredObject, offset: int, sink: ObjectSink) -> None:
        self.reads.append(offset)
        sink.write(self.data[offset : self.cut])


def _copy(staging: StagingArea, store: _Store, validator: str) -> None:
    obj = StoredObject("m/a.bin", "a.bin", len(store.data), validator)
    copy_object(obj, staging, NullProgress(), where="mem://m/a.bin", read=store.read)


def test_a_cut_transfer_keeps_its_bytes_and_the_retry_resumes_them(tmp_path: Path) -> None:
    staging = StagingArea(tmp_path)
    staging.create()
    store = _Store(b"0123456789", cut=4)
    with pytest.raises(FetchNetworkError, match="ended at 4 of 10 bytes"):
        _copy(staging, store, "v1")
    store.cut = None
    _copy(staging, store, "v1")
    assert store.reads == [0, 4]
    assert (staging.files / "a.bin").read_bytes() == b"0123456789"
    _copy(staging, store, "v1")  # complete, same version: not read again
    assert store.reads == [0, 4]


def test_another_version_restarts_from_byte_0(tmp_path: Path) -> None:
    staging = StagingArea(tmp_path)
    staging.create()
    with pytest.raises(FetchNetworkError):
        _copy(staging, _Store(b"old-bytes!", cut=4), "v1")
    store = _Store(b"new-bytes!")
    _copy(staging, store, "v2")
    assert store.reads == [0]
    assert (staging.files / "a.bin").read_bytes() == b"new-bytes!"


def test_a_read_that_discards_makes_the_retry_start_at_0(tmp_path: Path) -> None:
    """What gcs.py does when the bytes fail their checksum or another generation was
    served: the partial goes, so the same version is read again from byte 0."""
    staging = StagingArea(tmp_path)
    staging.create()
    reads: list[int] = []

    def bad_read(obj: StoredObject, offset: int, sink: ObjectSink) -> None:
        reads.append(offset)
        sink.write(b"0123")
        sink.discard()
        raise FetchNetworkError("checksum")

    obj = StoredObject("m/a.bin", "a.bin", 10, "v1")
    with pytest.raises(FetchNetworkError, match="checksum"):
        copy_object(obj, staging, NullProgress(), where="mem://m/a.bin", read=bad_read)
    store = _Store(b"0123456789")
    copy_object(obj, staging, NullProgress(), where="mem://m/a.bin", read=store.read)
    assert reads == [0]
    assert store.reads == [0]
    assert (staging.files / "a.bin").read_bytes() == b"0123456789"
