"""The cache on its own and through fetch_model with a local source copied into it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podserve.storage import Phase, fetch_model
from podserve.storage.cache import ModelCache
from podserve.storage.locks import FileLock
from tests.storage.support import expected_digest, write_model

MiB = 1 << 20


class Recorder:
    def __init__(self) -> None:
        self.phases: list[tuple[Phase, str]] = []
        self.files: list[str] = []

    def phase(self, phase: Phase, detail: str) -> None:
        self.phases.append((phase, detail))

    def file_started(self, name: str, total_bytes: int | None, resumed_bytes: int) -> None:
        self.files.append(name)

    def file_advanced(self, name: str, n_bytes: int) -> None:
        pass

    def file_finished(self, name: str) -> None:
        pass

    def close(self) -> None:
        pass


def _model(tmp_path: Path, name: str, size: int) -> tuple[Path, str]:
    files = {"w.bin": name.encode() * (size // len(name))}
    return write_model(tmp_path / name, files), expected_digest(files)


def _age(cache: Path, key: str, seconds_ago: int) -> None:
    manifest = cache / "entries" / f"{key}.manifest.json"
    past = manifest.stat().st_mtime - seconds_ago
    os.utime(manifest, (past, past))


def test_second_fetch_is_a_hit_without_copying(tmp_path: Path) -> None:
    root, digest = _model(tmp_path, "m", 4096)
    first = Recorder()
    a = fetch_model(
        root.as_uri(), digest=digest, cache_dir=tmp_path / "c", copy_local=True, progress=first
    )
    second = Recorder()
    b = fetch_model(
        root.as_uri(), digest=digest, cache_dir=tmp_path / "c", copy_local=True, progress=second
    )
    assert a.path == b.path
    assert not a.from_cache
    assert b.from_cache
    assert first.files == ["w.bin"]
    assert second.files == []
    for r in (a, b):
        assert r.lease is not None
        r.lease.release()


def test_truncated_pinned_entry_is_fetched_again(tmp_path: Path) -> None:
    root, digest = _model(tmp_path, "m", 4096)
    cache = tmp_path / "c"
    a = fetch_model(root.as_uri(), digest=digest, cache_dir=cache, copy_local=True)
    assert a.lease is not None
    a.lease.release()
    (a.path / "w.bin").write_bytes(b"short")
    b = fetch_model(root.as_uri(), digest=digest, cache_dir=cache, copy_local=True)
    assert not b.from_cache
    assert (b.path / "w.bin").read_bytes() == (root / "w.bin").read_bytes()
    assert b.lease is not None
    b.lease.release()


def test_unpinned_entry_is_rehashed_on_every_hit(tmp_path: Path) -> None:
    root, _ = _model(tmp_path, "m", 4096)
    cache = tmp_path / "c"
    a = fetch_model(root.as_uri(), cache_dir=cache, copy_local=True)
    assert a.path.name.startswith("uri-")
    assert a.lease is not None
    a.lease.release()
    data = bytearray((a.path / "w.bin").read_bytes())
    data[100] ^= 0xFF  # same size: only a full re-hash can notice
    (a.path / "w.bin").write_bytes(bytes(data))
    recorder = Recorder()
    b = fetch_model(root.as_uri(), cache_dir=cache, copy_local=True, progress=recorder)
    assert not b.from_cache
    assert (b.path / "w.bin").read_bytes() == (root / "w.bin").read_bytes()
    assert Phase.VERIFYING in [p for p, _ in recorder.phases]
    assert b.lease is not None
    b.lease.release()


def test_lru_eviction_skips_entries_in_use(tmp_path: Path) -> None:
    cache = tmp_path / "c"
    results = {}
    for name in ("old", "older", "new"):
        root, digest = _model(tmp_path, name, MiB)
        results[name] = fetch_model(root.as_uri(), digest=digest, cache_dir=cache, copy_local=True)
    keys = {n: r.path.name for n, r in results.items()}
    _age(cache, keys["older"], 300)
    _age(cache, keys["old"], 200)
    # "older" is still held by a (simulated) server; the others are released.
    for name in ("old", "new"):
        lease = results[name].lease
        assert lease is not None
        lease.release()
    root, digest = _model(tmp_path, "newest", MiB)
    recorder = Recorder()
    newest = fetch_model(
        root.as_uri(),
        digest=digest,
        cache_dir=cache,
        copy_local=True,
        max_cache_bytes=3 * MiB,
        progress=recorder,
    )
    remaining = {p.name for p in (cache / "entries").iterdir() if p.is_dir()}
    # 4 MiB over a 3 MiB bound: the LRU entry is in use, so the next one goes.
    assert remaining == {keys["older"], keys["new"], newest.path.name}
    assert (Phase.EVICTED, keys["old"]) in recorder.phases
    assert not (cache / "entries" / f"{keys['old']}.manifest.json").exists()


def test_eviction_cannot_get_under_the_bound_when_everything_is_in_use(tmp_path: Path) -> None:
    cache = tmp_path / "c"
    held = []
    for name in ("a", "b"):
        root, digest = _model(tmp_path, name, MiB)
        held.append(fetch_model(root.as_uri(), digest=digest, cache_dir=cache, copy_local=True))
    assert ModelCache(cache).evict(0) == []
    assert len([p for p in (cache / "entries").iterdir() if p.is_dir()]) == 2
    for r in held:
        assert r.lease is not None
        r.lease.release()
    assert len(ModelCache(cache).evict(0)) == 2


def test_only_the_entry_directory_means_published(tmp_path: Path) -> None:
    root, digest = _model(tmp_path, "m", 4096)
    cache = tmp_path / "c"
    a = fetch_model(root.as_uri(), digest=digest, cache_dir=cache, copy_local=True)
    assert a.lease is not None
    a.lease.release()
    store = ModelCache(cache)
    key = a.path.name
    assert store.lookup(key) is not None
    store.remove(key)
    assert store.lookup(key) is None
    # An orphan manifest (killed between the two renames of a publish) is not an entry.
    (cache / "entries" / f"{key}.manifest.json").write_text("{}")
    assert store.lookup(key) is None


def test_shared_and_exclusive_locks_exclude_each_other(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    shared_a, shared_b = FileLock(path, shared=True), FileLock(path, shared=True)
    exclusive = FileLock(path)
    assert shared_a.acquire(blocking=False)
    assert shared_b.acquire(blocking=False)
    assert not exclusive.acquire(blocking=False)
    shared_a.release()
    shared_b.release()
    assert exclusive.acquire(blocking=False)
    assert not FileLock(path, shared=True).acquire(blocking=False)
    exclusive.release()


@pytest.mark.parametrize("max_bytes", [None, 10 * MiB])
def test_a_bound_above_the_total_evicts_nothing(tmp_path: Path, max_bytes: int | None) -> None:
    cache = tmp_path / "c"
    for name in ("a", "b"):
        root, digest = _model(tmp_path, name, MiB)
        r = fetch_model(
            root.as_uri(),
            digest=digest,
            cache_dir=cache,
            copy_local=True,
            max_cache_bytes=max_bytes,
        )
        assert r.lease is not None
        r.lease.release()
    assert len([p for p in (cache / "entries").iterdir() if p.is_dir()]) == 2


def test_ensure_local_holds_the_entry_until_released(tmp_path: Path) -> None:
    from podserve.storage import ensure_local, release_local

    cache = tmp_path / "c"
    root, digest = _model(tmp_path, "m", 4096)
    path = ensure_local(str(root), digest=digest, cache_dir=cache, copy_local=True)
    assert ModelCache(cache).evict(0) == []  # in use by this process
    release_local(path)
    assert ModelCache(cache).evict(0) == [path.name]
    assert not path.exists()
