"""A digest pin on a name that moves: `models:/m@champion@sha256:...`.

A pinned cache entry is keyed by its digest alone, so a node that holds the pinned bytes
would serve them for any URI carrying that pin, even after the alias moved to another
version. A pin means "this name must still name these bytes": when a fetcher resolved the
URI to something more specific (an alias or `latest` to a version number), the entry is
served only if the resolved source is one it was verified from. Otherwise the resolved
version is downloaded into staging and hashed once:

    same digest     the version is recorded on the entry (the next fetch does not download)
    other digest    DigestMismatch naming the alias, both versions and both digests

A registry version never changes its artefacts (MLflow keeps them immutable), so "verified
from `models:/m/3 on <server>`" stays true for the entry's life.
"""

from __future__ import annotations

from podserve.storage.cache import CachedEntry, CacheKey, ModelCache
from podserve.storage.digest import compute_manifest
from podserve.storage.errors import DigestMismatch
from podserve.storage.fetchers import Fetcher, StagingArea
from podserve.storage.progress import Phase, Progress
from podserve.storage.uri import ModelURI


def names_a_moving_target(requested: ModelURI, resolved: ModelURI) -> bool:
    """True when resolving replaced the name (an alias, `latest`) by what it names now."""
    return requested.location != resolved.location


def moved_where(requested: ModelURI, resolved: ModelURI, cached_from: str | None = None) -> str:
    """What a refusal names: the moving name, the version it names now and, when the
    node holds the pinned bytes, the version they were verified from."""
    name = f"{requested.scheme.value}:/{requested.location}"
    text = f"{name} (which now names {resolved.normalized()}"
    if cached_from is not None:
        text += f"; the cached copy of the pinned digest came from {cached_from}"
    return text + ")"


def confirm_resolved(
    cache: ModelCache,
    key: CacheKey,
    requested: ModelURI,
    resolved: ModelURI,
    fetcher: Fetcher,
    report: Progress,
) -> CachedEntry | None:
    """The published pinned entry, once the resolved source is known to hold its bytes;
    None when the entry is gone (the caller fetches it as a miss). Raises DigestMismatch
    when the resolved source holds other bytes. Call with the key's use lease held."""
    entry = cache.lookup(key.name)
    if entry is None or key.source in entry.sources:
        return entry
    lock = cache.fetch_lock(key.name)
    if not lock.acquire(blocking=False):
        report.phase(Phase.WAITING_FOR_LOCK, f"another process is fetching {resolved}")
        lock.acquire()
    with lock:
        entry = cache.lookup(key.name)  # another process may have confirmed it meanwhile
        if entry is None or key.source in entry.sources:
            return entry
        staging = StagingArea(cache.prepare_staging(key))
        staging.create()
        report.phase(
            Phase.DOWNLOADING,
            f"{resolved} to check it against the cached copy from {entry.source}",
        )
        fetcher.fetch(resolved, staging, report)
        report.phase(Phase.VERIFYING, str(resolved))
        digest = compute_manifest(staging.files).digest
        cache.discard_staging(key)
        if digest != key.pinned:
            raise DigestMismatch(
                expected=str(key.pinned),
                actual=str(digest),
                where=moved_where(requested, resolved, cached_from=entry.source),
            )
        cache.record_source(key.name, key.source)
        return cache.lookup(key.name)
