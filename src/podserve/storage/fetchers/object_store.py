"""What the object-store fetchers (s3.py, gcs.py, azure_blob.py) share: a URI's key names
one object when it exists, else every object under `key/` as a directory; each object is
read from where an earlier attempt stopped, under the validator (ETag, generation) the
listing gave, so a resume never splices two versions of an object.

A backend supplies only its client calls (`Head`, `ListUnder`, `ReadFrom`) and its error
mapping; the selection and the resumable copy are here, written once. The shape is
KServe's storage initializer's for every store (`_download_s3`, `_download_gcs`,
`_download_azure_blob` in kserve/kserve python/storage/kserve_storage/kserve_storage.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import BinaryIO

from podserve.storage.errors import FetchNetworkError, StorageError
from podserve.storage.fetchers.base import PartialFile, StagingArea, write_all
from podserve.storage.progress import Progress


@dataclass(frozen=True, slots=True)
class StoredObject:
    """One object to fetch: its name in the store, its path in the model, its size and
    the validator that names this version of its bytes."""

    name: str
    rel: str
    size_bytes: int
    validator: str


@dataclass(frozen=True, slots=True)
class Listed:
    """One object as the store describes it, before it is placed in the model."""

    name: str
    size_bytes: int
    validator: str


# The one object named `key`, or None when there is none (a prefix, or nothing).
Head = Callable[[str], Listed | None]
# Every object whose name starts with the prefix given ("" for the whole bucket).
ListUnder = Callable[[str], Iterable[Listed]]
# A prefix with nothing under it: the backend's not-found error, naming the prefix.
Missing = Callable[[str], StorageError]


def select_objects(
    key: str, *, head: Head, list_under: ListUnder, missing: Missing
) -> list[StoredObject]:
    """The object `key` when it exists, else every object under `key/` (names ending in
    `/`, the folder markers tools and consoles write, are skipped)."""
    if key:
        found = head(key)
        if found is not None:
            return [StoredObject(key, key.rsplit("/", 1)[-1], found.size_bytes, found.validator)]
    prefix = f"{key}/" if key else ""
    objects = [
        StoredObject(item.name, item.name[len(prefix) :], item.size_bytes, item.validator)
        for item in list_under(prefix)
        if not item.name.endswith("/")
    ]
    if not objects:
        raise missing(prefix)
    return objects


class ObjectSink:
    """Where a backend's read puts the bytes: the partial file, counted for progress.
    File-like enough (`write`) for a library that downloads into a file object."""

    __slots__ = ("_out", "_part", "_progress", "_rel")

    def __init__(self, out: BinaryIO, part: PartialFile, progress: Progress, rel: str) -> None:
        self._out = out
        self._part = part
        self._progress = progress
        self._rel = rel

    def write(self, chunk: bytes) -> int:
        write_all(self._out, chunk)
        self._progress.file_advanced(self._rel, len(chunk))
        return len(chunk)

    def discard(self) -> None:
        """Drop the bytes kept so far: they are not of the listed version, so a retry must
        start the object again from byte 0."""
        self._part.discard()


# Write the object's bytes from `offset` to its end into the sink, under its validator.
ReadFrom = Callable[[StoredObject, int, ObjectSink], None]


def copy_object(
    obj: StoredObject, staging: StagingArea, progress: Progress, *, where: str, read: ReadFrom
) -> None:
    """Fetch one object into the staging area, resuming an earlier attempt's partial when
    it was of the same version (same validator), else starting again."""
    part = staging.partial(obj.rel)
    if part.is_complete(obj.validator):
        return
    offset = part.resume_offset(obj.validator)
    if offset > obj.size_bytes:
        offset = 0
    progress.file_started(obj.rel, obj.size_bytes, offset)
    with part.open(offset=offset, validator=obj.validator) as out:
        if offset < obj.size_bytes:
            read(obj, offset, ObjectSink(out, part, progress, obj.rel))
        written = out.tell()
    if written != obj.size_bytes:
        raise FetchNetworkError(
            f"{where}: the transfer ended at {written} of {obj.size_bytes} bytes; "
            "a retry resumes it"
        )
    part.complete()
    progress.file_finished(obj.rel)
