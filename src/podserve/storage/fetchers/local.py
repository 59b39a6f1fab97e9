"""Copy a local file or directory into the cache.

Used only when asked (`copy_local`): by default a local model is served where it lies.
Copying helps when the path is a slow or shared mount and the node should keep its own
verified copy.
"""

from __future__ import annotations

from podserve.storage.digest import iter_model_files
from podserve.storage.errors import ModelNotFoundAtSource
from podserve.storage.fetchers.base import CHUNK_BYTES, StagingArea, write_all
from podserve.storage.progress import Progress
from podserve.storage.uri import ModelURI


class LocalFetcher:
    __slots__ = ()

    def fetch(self, uri: ModelURI, staging: StagingArea, progress: Progress) -> None:
        root = uri.local_path
        if not root.exists():
            raise ModelNotFoundAtSource(f"no such file or directory: {root}")
        files = dict(iter_model_files(root))
        staging.prune(set(files))
        for rel, src in sorted(files.items()):
            part = staging.partial(rel)
            size = src.stat().st_size
            # A local source has no ETag; size and mtime stand in for one.
            validator = f"{size}:{src.stat().st_mtime_ns}"
            if part.is_complete(validator):
                continue
            offset = part.resume_offset(validator)
            if offset > size:
                offset = 0
            progress.file_started(rel, size, offset)
            with src.open("rb") as fin, part.open(offset=offset, validator=validator) as fout:
                fin.seek(offset)
                while chunk := fin.read(CHUNK_BYTES):
                    write_all(fout, chunk)
                    progress.file_advanced(rel, len(chunk))
            part.complete()
            progress.file_finished(rel)
