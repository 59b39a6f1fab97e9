"""The node's content-addressed model cache.

Layout under the cache root (`$PODSERVE_CACHE_DIR`, `/cache` in the image):

    entries/<key>/                  a published model: complete and verified
    entries/<key>.manifest.json     written beside it at fetch time (files, sizes, hashes)
    locks/<key>.fetch               exclusive flock: one process downloads a key at a time
    locks/<key>.use                 shared flock: held by every process using the entry
    tmp/<key>--<source>/            staging: downloads (and their .partial files) land here
    tmp/trash-*                     entries being deleted

`<key>` is `sha256-<hex>` for a pinned model (the same bytes from two URIs are one entry)
and `uri-<hex of the normalized URI>` for an unpinned one.

An entry is published by renaming its manifest and then its staging directory into
`entries/`: a rename within one filesystem is atomic, so a reader sees a whole entry or
none, and a process killed at any point leaves at most staging (resumed next time) or an
orphan manifest (overwritten next time). Only the directory's presence means "published".

"In use" is a shared flock on `locks/<key>.use` rather than a marker file: the kernel
drops it when the holder dies, so a crashed server never pins an entry for ever, and
eviction tests it with a non-blocking exclusive lock, which also keeps anyone from taking
the entry up while it is being deleted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import orjson

from podserve.storage.archive import archive_format
from podserve.storage.digest import Digest, Manifest, ManifestEntry
from podserve.storage.errors import CacheCorrupted
from podserve.storage.locks import FileLock
from podserve.storage.uri import ModelURI

MANIFEST_FORMAT = "podserve-cache-manifest/v1"


@dataclass(frozen=True, slots=True)
class CacheKey:
    name: str
    pinned: Digest | None
    source: str
    source_id: str

    @property
    def staging_name(self) -> str:
        # Per source as well as per key: two URIs pinned to one digest never resume into
        # each other's partial files.
        return f"{self.name}--{self.source_id[:16]}"


@dataclass(frozen=True, slots=True)
class CachedEntry:
    key: str
    path: Path
    manifest: Manifest
    pinned: bool
    source: str
    last_used_ns: int
    # Every source verified to hold these bytes: `source` plus those a pinned fetch of a
    # moving name (an MLflow alias) checked later (resolved_pin.py).
    sources: frozenset[str] = frozenset()


def key_for(uri: ModelURI) -> CacheKey:
    source_id = uri.source_id()
    if uri.pinned is not None:
        name = f"{uri.pinned.algorithm}-{uri.pinned.hex}"
    else:
        name = f"uri-{source_id}"
        if archive_format(uri) is not None:
            # Earlier versions stored an archive as one file under `uri-<id>`: an unpinned
            # archive URI gets its own key, so that such an entry is never served as a tree.
            name += "-unpacked"
    return CacheKey(name, uri.pinned, uri.normalized(), source_id)


class ModelCache:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.entries_dir = root / "entries"
        self.locks_dir = root / "locks"
        self.tmp_dir = root / "tmp"

    # -- paths and locks -------------------------------------------------------------

    def entry_path(self, key: str) -> Path:
        return self.entries_dir / key

    def manifest_path(self, key: str) -> Path:
        return self.entries_dir / f"{key}.manifest.json"

    def staging_path(self, key: CacheKey) -> Path:
        return self.tmp_dir / key.staging_name

    def fetch_lock(self, key: str) -> FileLock:
        return FileLock(self.locks_dir / f"{key}.fetch")

    def use_lock(self, key: str) -> FileLock:
        return FileLock(self.locks_dir / f"{key}.use", shared=True)

    # -- reading ---------------------------------------------------------------------

    def lookup(self, key: str) -> CachedEntry | None:
        """The published entry, or None. Reads only the manifest; see `check`."""
        path = self.entry_path(key)
        manifest_path = self.manifest_path(key)
        if not path.is_dir():
            return None
        try:
            raw = manifest_path.read_bytes()
            last_used_ns = manifest_path.stat().st_mtime_ns
        except FileNotFoundError:
            return None
        try:
            doc = orjson.loads(raw)
            manifest = Manifest.of(
                ManifestEntry(str(f["path"]), int(f["size_bytes"]), str(f["sha256"]))
                for f in doc["files"]
            )
            recorded = Digest.parse(str(doc["digest"]))
            pinned = bool(doc["pinned"])
            source = str(doc["source"])
            sources = frozenset([source, *map(str, doc.get("verified_sources", []))])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise CacheCorrupted(f"unreadable cache manifest {manifest_path}: {exc}") from exc
        if manifest.digest != recorded:
            raise CacheCorrupted(f"cache manifest {manifest_path} contradicts itself")
        return CachedEntry(key, path, manifest, pinned, source, last_used_ns, sources)

    def entries(self) -> list[CachedEntry]:
        found = []
        if self.entries_dir.is_dir():
            for child in self.entries_dir.iterdir():
                if child.is_dir():
                    with contextlib.suppress(CacheCorrupted):
                        entry = self.lookup(child.name)
                        if entry is not None:
                            found.append(entry)
        return found

    def touch(self, key: str) -> None:
        """Record a use: the manifest's mtime is the entry's last-used time for LRU."""
        with contextlib.suppress(FileNotFoundError):
            os.utime(self.manifest_path(key))

    # -- writing (callers hold the key's fetch lock) ---------------------------------------

    def prepare_staging(self, key: CacheKey) -> Path:
        """The staging directory, keeping whatever an interrupted earlier fetch left."""
        staging = self.staging_path(key)
        staging.mkdir(parents=True, exist_ok=True)
        return staging

    def discard_staging(self, key: CacheKey) -> None:
        self._remove_tree(self.staging_path(key))

    def publish(self, key: CacheKey, staging: Path, manifest: Manifest) -> Path:
        """Move a verified staging directory into place, atomically. Returns its path."""
        self.entries_dir.mkdir(parents=True, exist_ok=True)
        _fsync_tree(staging)
        doc = {
            "format": MANIFEST_FORMAT,
            "digest": str(manifest.digest),
            "pinned": key.pinned is not None,
            "source": key.source,
            "fetched_at_unix_s": time.time(),  # wall time, for people reading the file
            "total_size_bytes": manifest.total_size_bytes,
            "files": [
                {"path": e.path, "size_bytes": e.size_bytes, "sha256": e.sha256}
                for e in manifest.entries
            ],
        }
        manifest_tmp = self.tmp_dir / f"{key.staging_name}.manifest.json"
        manifest_tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        _fsync_path(manifest_tmp)
        target = self.entry_path(key.name)
        if target.exists():
            # Only a damaged entry can be here: callers publish after `lookup` said None.
            self._remove_tree(target)
        os.replace(manifest_tmp, self.manifest_path(key.name))
        os.rename(staging, target)  # the commit point
        _fsync_path(self.entries_dir)
        return target

    def record_source(self, key: str, source: str) -> None:
        """Note on a published entry that `source` was verified to hold its bytes. The
        manifest is rewritten whole and renamed into place, so a reader sees the old or
        the new one."""
        manifest_path = self.manifest_path(key)
        doc = orjson.loads(manifest_path.read_bytes())
        known = [str(s) for s in doc.get("verified_sources", [])]
        if source == doc.get("source") or source in known:
            return
        doc["verified_sources"] = [*known, source]
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.tmp_dir / f"{key}.{uuid.uuid4().hex}.manifest.json"
        tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        _fsync_path(tmp)
        os.replace(tmp, manifest_path)

    def remove(self, key: str) -> None:
        """Delete an entry: the directory first, so that it stops counting as published."""
        self._remove_tree(self.entry_path(key))
        with contextlib.suppress(FileNotFoundError):
            self.manifest_path(key).unlink()

    def _remove_tree(self, path: Path) -> None:
        if not path.exists():
            return
        # Rename first: an entry disappears at once, and a crash mid-delete leaves only
        # trash, which `clear_trash` finishes.
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        trash = self.tmp_dir / f"trash-{uuid.uuid4().hex}"
        os.rename(path, trash)
        shutil.rmtree(trash, ignore_errors=True)

    def clear_trash(self) -> None:
        if self.tmp_dir.is_dir():
            for child in self.tmp_dir.glob("trash-*"):
                shutil.rmtree(child, ignore_errors=True)

    # -- eviction --------------------------------------------------------------------

    def evict(self, max_size_bytes: int, *, keep: frozenset[str] = frozenset()) -> list[str]:
        """Delete least-recently-used entries not in use until the published entries total
        at most `max_size_bytes`. Entries in use are skipped, so the bound can stay
        exceeded; it is a target, never a reason to fail a fetch. Returns evicted keys."""
        self.clear_trash()
        entries = sorted(self.entries(), key=lambda e: e.last_used_ns)
        total = sum(e.manifest.total_size_bytes for e in entries)
        evicted: list[str] = []
        for entry in entries:
            if total <= max_size_bytes:
                break
            if entry.key in keep:
                continue
            probe = FileLock(self.locks_dir / f"{entry.key}.use")
            if not probe.acquire(blocking=False):
                continue  # a live process holds it shared: in use
            try:
                if self.lookup(entry.key) is None:
                    continue  # another evictor got there first
                self.remove(entry.key)
            finally:
                probe.release()
            total -= entry.manifest.total_size_bytes
            evicted.append(entry.key)
        return evicted


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """Flush file data before the rename that publishes it, so that a power cut cannot
    leave a published entry of empty files."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            _fsync_path(Path(dirpath, name))
        _fsync_path(Path(dirpath))
