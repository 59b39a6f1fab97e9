"""Resolve a model URI to a verified local directory.

resolve → (hit? check it) → lock → download into staging → (unpack) → verify → publish → evict.

An http(s) URI naming an archive (`.tar.gz`, `.zip`, ... see archive.py) is unpacked in
the staging area, and the digest covers the unpacked tree, not the archive's bytes.

A local path is served where it lies (verified in place when pinned). Everything else
goes through the node cache (cache.py): under the key's exclusive lock one process
downloads while the others wait and then find the published entry, and nothing is
published before it has been verified, so a killed or failed fetch is never served.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from podserve.storage.archive import ArchiveLimits, archive_format, unpack_staged
from podserve.storage.cache import CachedEntry, CacheKey, ModelCache, key_for
from podserve.storage.digest import Digest, compute_manifest, sizes_match, verify
from podserve.storage.errors import CacheCorrupted, DigestMismatch, ModelNotFoundAtSource
from podserve.storage.fetchers import (
    Fetcher,
    SourceOptions,
    StagingArea,
    default_fetchers,
    resolve_source,
)
from podserve.storage.fetchers import fetcher_for as _fetcher_for
from podserve.storage.locks import FileLock
from podserve.storage.progress import NullProgress, Phase, Progress
from podserve.storage.resolved_pin import confirm_resolved, moved_where, names_a_moving_target
from podserve.storage.uri import ModelURI, Scheme, parse_model_uri


@dataclass(frozen=True, slots=True)
class FetchResult:
    """`lease` is the shared in-use lock on the cache entry (None for a model served in
    place): while it is held no other process evicts the entry. Release it when done."""

    path: Path
    digest: Digest | None
    from_cache: bool
    lease: FileLock | None


def fetch_model(
    uri: str | ModelURI,
    *,
    cache_dir: Path,
    digest: str | Digest | None = None,
    progress: Progress | None = None,
    sources: SourceOptions | None = None,
    copy_local: bool = False,
    max_cache_bytes: int | None = None,
    fetchers: Mapping[Scheme, Fetcher] | None = None,
    verify_hit: bool = False,
    archive_limits: ArchiveLimits | None = None,
) -> FetchResult:
    """The verified local copy of `uri`, holding its in-use lease. Synchronous: the
    server runs it in a worker thread.

    `digest` pins the model as `...@sha256:<hex>` in the URI does; `copy_local` puts a
    local path through the cache too; `max_cache_bytes` bounds the cache (LRU eviction of
    entries not in use); `verify_hit` re-hashes a pinned hit against its digest (a
    shared node cache any pod can write to); `fetchers` replaces the per-scheme fetchers
    (tests, new schemes); `archive_limits` bounds what an archive may unpack to.
    """
    parsed = uri if isinstance(uri, ModelURI) else parse_model_uri(uri, digest=digest)
    if isinstance(uri, ModelURI) and digest is not None:
        parsed = parse_model_uri(str(uri), digest=digest)
    report = progress or NullProgress()
    if parsed.is_local and not copy_local:
        return _serve_in_place(parsed, report)

    table = fetchers if fetchers is not None else default_fetchers(sources or SourceOptions())
    # A registry alias names a moving target: key the cache by the version it names now.
    requested, parsed = parsed, resolve_source(table, parsed)
    # A pin on a moving name holds only if the version it names now has the pinned bytes.
    moving_pin = parsed.pinned is not None and names_a_moving_target(requested, parsed)
    cache = ModelCache(cache_dir)
    key = key_for(parsed)
    lease = cache.use_lock(key.name)
    lease.acquire()
    try:
        against = key.pinned if verify_hit else None
        entry = _checked_hit(cache, key.name, report, against=against)
        if entry is not None and moving_pin:
            fetcher = _fetcher_for(table, parsed.scheme)
            entry = confirm_resolved(cache, key, requested, parsed, fetcher, report)
        from_cache = entry is not None
        if entry is None:
            fetcher = _fetcher_for(table, parsed.scheme)
            try:
                entry, from_cache = _fetch_locked(
                    cache,
                    key,
                    parsed,
                    fetcher,
                    report,
                    against,
                    archive_limits or ArchiveLimits(),
                )
            except DigestMismatch as exc:
                if not moving_pin:
                    raise
                where = moved_where(requested, parsed)
                raise DigestMismatch(
                    expected=exc.expected, actual=exc.actual, where=where
                ) from None
            if from_cache and moving_pin:  # published meanwhile by a process with a pin
                confirmed = confirm_resolved(cache, key, requested, parsed, fetcher, report)
                entry = confirmed or entry
        cache.touch(key.name)
        if max_cache_bytes is not None:
            for evicted in cache.evict(max_cache_bytes, keep=frozenset({key.name})):
                report.phase(Phase.EVICTED, evicted)
    except BaseException:
        lease.release()
        raise
    return FetchResult(entry.path, entry.manifest.digest, from_cache, lease)


def _serve_in_place(uri: ModelURI, report: Progress) -> FetchResult:
    path = uri.local_path
    if not path.exists():
        raise ModelNotFoundAtSource(f"no such file or directory: {path}")
    if uri.pinned is None:
        return FetchResult(path, None, False, None)
    report.phase(Phase.VERIFYING, str(path))
    manifest = verify(path, uri.pinned)
    return FetchResult(path, manifest.digest, False, None)


def _checked_hit(
    cache: ModelCache, key: str, report: Progress, *, against: Digest | None = None
) -> CachedEntry | None:
    """The published entry if it still holds what its manifest says, else None.

    A pinned entry was verified against its content address before it was published, so
    a hit checks file names and sizes only (catching truncation without re-reading
    gigabytes). An unpinned entry has nothing but its own manifest to answer to, so it is
    re-hashed in full against it. With `against` (fetch --verify-hit) a pinned hit is
    re-hashed against the pinned digest itself, not its manifest: on a shared node path
    both could have been rewritten.
    """
    try:
        entry = cache.lookup(key)
    except CacheCorrupted:
        return None
    if entry is None:
        return None
    if entry.pinned and against is not None:
        report.phase(Phase.VERIFYING, f"{entry.path} (re-hashing a shared cache hit)")
        try:
            return entry if compute_manifest(entry.path).digest == against else None
        except (OSError, ModelNotFoundAtSource):
            return None
    if entry.pinned:
        return entry if sizes_match(entry.path, entry.manifest) else None
    report.phase(Phase.VERIFYING, f"{entry.path} (unpinned: re-hashing)")
    try:
        return entry if compute_manifest(entry.path) == entry.manifest else None
    except (OSError, ModelNotFoundAtSource):
        return None


def _fetch_locked(
    cache: ModelCache,
    key: CacheKey,
    uri: ModelURI,
    fetcher: Fetcher,
    report: Progress,
    against: Digest | None = None,
    archive_limits: ArchiveLimits | None = None,
) -> tuple[CachedEntry, bool]:
    lock = cache.fetch_lock(key.name)
    if not lock.acquire(blocking=False):
        report.phase(Phase.WAITING_FOR_LOCK, f"another process is fetching {uri}")
        lock.acquire()
    with lock:
        # Whoever held the lock may have published it meanwhile.
        entry = _checked_hit(cache, key.name, report, against=against)
        if entry is not None:
            report.phase(Phase.CACHE_HIT, str(entry.path))
            return entry, True
        if cache.entry_path(key.name).exists() or cache.manifest_path(key.name).exists():
            cache.remove(key.name)  # damaged: fetch it again rather than serve it
        staging = StagingArea(cache.prepare_staging(key))
        staging.create()
        report.phase(Phase.DOWNLOADING, str(uri))
        fetcher.fetch(uri, staging, report)
        kind = archive_format(uri)
        if kind is not None:
            report.phase(Phase.UNPACKING, f"{uri} ({kind})")
            # Unpacked beside files/ and swapped in whole: a refused or interrupted
            # unpack leaves nothing that could be verified and published.
            limits = archive_limits or ArchiveLimits()
            unpack_staged(staging.files, staging.state / "unpacking", kind, limits)
        report.phase(Phase.VERIFYING, str(uri))
        manifest = compute_manifest(staging.files)
        if key.pinned is not None and manifest.digest != key.pinned:
            # Start clean next time: resuming into these bytes would only fail again.
            cache.discard_staging(key)
            raise DigestMismatch(
                expected=str(key.pinned), actual=str(manifest.digest), where=str(uri)
            )
        path = cache.publish(key, staging.files, manifest)
        cache.discard_staging(key)
        report.phase(Phase.PUBLISHED, str(path))
        published = cache.lookup(key.name)
        if published is None:
            raise CacheCorrupted(f"{path} vanished right after it was published")
        return published, False


# -- the server's entry point ------------------------------------------------------------

_leases_guard = threading.Lock()
_leases: dict[Path, list[FileLock]] = {}


def ensure_local(
    uri: str,
    *,
    digest: str | None,
    cache_dir: Path,
    progress: Progress | None = None,
    sources: SourceOptions | None = None,
    copy_local: bool = False,
    max_cache_bytes: int | None = None,
) -> Path:
    """A verified local directory (or file, for a local single-file model served in place)
    for `uri`. The cache entry stays marked in use by this process, so that no other pod
    evicts it, until `release_local(path)` or the process exits."""
    result = fetch_model(
        uri,
        digest=digest,
        cache_dir=cache_dir,
        progress=progress,
        sources=sources,
        copy_local=copy_local,
        max_cache_bytes=max_cache_bytes,
    )
    if result.lease is not None:
        with _leases_guard:
            _leases.setdefault(result.path, []).append(result.lease)
    return result.path


def release_local(path: Path) -> None:
    """Drop one in-use mark taken by `ensure_local` for `path` (e.g. on unload)."""
    with _leases_guard:
        held = _leases.get(path)
        if not held:
            return
        lease = held.pop()
        if not held:
            del _leases[path]
    lease.release()
