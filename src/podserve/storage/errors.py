"""Storage errors. Each names what was asked for and what went wrong, so that an init
container's log line alone tells an operator what to fix. `podserve fetch` maps each kind
to its own exit code (see cli/fetch.py); the server maps them to a failed model load."""

from __future__ import annotations

from podserve.core.errors import PodserveError


class StorageError(PodserveError):
    """Base of every error raised by podserve.storage."""


class InvalidModelURI(StorageError):
    """The URI or digest is malformed, contradicts itself, or names an unsupported scheme."""


class ModelNotFoundAtSource(StorageError):
    """The source answered, and the model is not there (missing path, 404, no such key)."""


class SourceAccessDenied(StorageError):
    """The source refused the credentials (401/403); retrying will not help."""


class FetchNetworkError(StorageError):
    """The source could not be reached or the transfer broke off; retrying may work, and a
    retry resumes from the bytes already in the cache's tmp area."""


class DigestMismatch(StorageError):
    """The bytes do not hash to the pinned digest; the copy is never served."""

    def __init__(self, *, expected: str, actual: str, where: str) -> None:
        super().__init__(
            f"digest mismatch for {where}: expected {expected}, got {actual}; "
            "refusing to serve it (re-pin the digest if the model changed on purpose)"
        )
        self.expected = expected
        self.actual = actual
        self.where = where


class CacheCorrupted(StorageError):
    """A published cache entry no longer matches the manifest written when it was fetched."""


class MissingExtra(StorageError):
    """The scheme needs an optional dependency that is not installed."""

    def __init__(self, *, scheme: str, extra: str, module: str, what: str | None = None) -> None:
        # `what` names sources that no scheme of their own tells apart (Azure Blob's https).
        super().__init__(
            f"{what or scheme + ':// URIs'} need the {module!r} package: "
            f"pip install 'podserve[{extra}]'"
        )
        self.extra = extra
