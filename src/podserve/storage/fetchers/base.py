"""What every fetcher shares: the protocol, source settings and the staging area.

A fetcher's whole job is one call: put every file of a model into a staging directory,
resuming whatever an earlier, interrupted call left there. Locking, verifying and
publishing belong to fetch.py, so a fetcher for a new scheme is one small module.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import quote

import orjson

from podserve.storage.errors import InvalidModelURI
from podserve.storage.progress import Progress
from podserve.storage.uri import ModelURI

CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """How to reach sources. None means the client library's own default (and its
    environment variables: AWS_*, HF_ENDPOINT, HF_TOKEN, HTTPS_PROXY, ...)."""

    s3_endpoint_url: str | None = None
    hf_endpoint: str | None = None
    hf_cache_dir: Path | None = None
    hf_offline: bool = False
    timeout_s: float = 60.0
    # models:/ and runs:/ (fetchers/mlflow.py); None: MLFLOW_TRACKING_URI / _TOKEN, as the
    # mlflow client reads them.
    mlflow_tracking_uri: str | None = None
    mlflow_token: str | None = None
    # gs:// (fetchers/gcs.py): None: STORAGE_EMULATOR_HOST, else storage.googleapis.com.
    # Anonymous requests reach public buckets without any credentials chain.
    gcs_endpoint_url: str | None = None
    gcs_anonymous: bool = False
    # Azure Blob (fetchers/azure_blob.py): the account URL to use instead of
    # https://<account>.blob.core.windows.net (Azurite, a private endpoint).
    azure_blob_endpoint: str | None = None


class Fetcher(Protocol):
    def fetch(self, uri: ModelURI, staging: StagingArea, progress: Progress) -> None:
        """Download the model at `uri` into `staging.files`.

        Raises ModelNotFoundAtSource, SourceAccessDenied or FetchNetworkError.
        """
        ...


@dataclass(frozen=True, slots=True)
class StagingArea:
    """`files/` becomes the published entry; `state/` holds the .partial files and the
    validators (ETags) that make resuming safe, outside the tree that is digested."""

    root: Path

    @property
    def files(self) -> Path:
        return self.root / "files"

    @property
    def state(self) -> Path:
        return self.root / "state"

    def create(self) -> None:
        self.files.mkdir(parents=True, exist_ok=True)
        self.state.mkdir(parents=True, exist_ok=True)

    def partial(self, rel: str) -> PartialFile:
        return PartialFile(self.files / safe_relpath(rel), self.state / quote(rel, safe=""))

    def prune(self, keep: set[str]) -> None:
        """Remove files a previous attempt left that the source no longer lists."""
        for dirpath, _dirs, filenames in os.walk(self.files):
            for name in filenames:
                path = Path(dirpath, name)
                if path.relative_to(self.files).as_posix() not in keep:
                    path.unlink()


class PartialFile:
    """One file's download: bytes go to `<state>.partial`, renamed to the final path when
    complete. `<state>.json` remembers the source's validator (ETag or Last-Modified), so
    that a resume appends only to bytes of the same version of the file."""

    __slots__ = ("_meta", "final", "partial")

    def __init__(self, final: Path, state_stem: Path) -> None:
        self.final = final
        self.partial = state_stem.with_name(state_stem.name + ".partial")
        self._meta = state_stem.with_name(state_stem.name + ".json")

    def saved_validator(self) -> str | None:
        try:
            value = orjson.loads(self._meta.read_bytes()).get("validator")
        except (FileNotFoundError, orjson.JSONDecodeError, AttributeError):
            return None
        return value if isinstance(value, str) else None

    def is_complete(self, validator: str | None) -> bool:
        """Done by an earlier attempt, from the same version when a validator is known."""
        if not self.final.is_file():
            return False
        return validator is None or self.saved_validator() == validator

    def resume_offset(self, validator: str | None) -> int:
        """Bytes to keep: the partial's size, or 0 when it came from another version."""
        if validator is not None and self.saved_validator() not in (None, validator):
            return 0
        try:
            return self.partial.stat().st_size
        except FileNotFoundError:
            return 0

    def open(self, *, offset: int, validator: str | None) -> BinaryIO:
        """Open for writing at `offset` (0 truncates). Unbuffered, so that every chunk
        received is in the file even if the process is killed the next instant."""
        self.final.unlink(missing_ok=True)
        self.partial.parent.mkdir(parents=True, exist_ok=True)
        self._meta.write_bytes(orjson.dumps({"validator": validator}))
        f = self.partial.open("r+b" if offset and self.partial.exists() else "wb", buffering=0)
        f.truncate(offset)
        f.seek(offset)
        return f

    def complete(self) -> None:
        self.final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.partial, self.final)

    def discard(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.partial.unlink()


def write_all(f: BinaryIO, chunk: bytes) -> None:
    """An unbuffered write may take fewer bytes than given; loop until all are written."""
    view = memoryview(chunk)
    while view:
        view = view[f.write(view) or 0 :]


def safe_relpath(rel: str) -> str:
    """Refuse names that would write outside the staging directory."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise InvalidModelURI(f"refusing unsafe file name {rel!r} from the source")
    return rel
