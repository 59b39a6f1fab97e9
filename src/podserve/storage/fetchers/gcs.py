"""gs:// sources through google-cloud-storage (the `[gcs]` extra).

`gs://bucket/key` fetches that one object when it exists, else every object under `key/`
as a directory (names ending in `/`, the folder placeholders the Cloud console writes, are
skipped): the shape of s3:// (fetchers/s3.py) and of KServe's `_download_gcs`
(kserve/kserve python/storage/kserve_storage/kserve_storage.py).

A generation number names one version of an object's bytes
(https://cloud.google.com/storage/docs/metadata#generation-number). It is the resume
validator: an object replaced between two attempts has a new generation in the listing, so
its partial is read again from byte 0 (base.PartialFile); each read is a ranged GET with
`ifGenerationMatch=<listed generation>`, so an object replaced during the read answers 412
(https://cloud.google.com/storage/docs/request-preconditions) instead of a tail of other
bytes. A server that ignores the precondition still names the generation it served in
`x-goog-generation`, and a mismatch there discards the partial too.

Credentials come from the library's default chain (google.auth.default):
GOOGLE_APPLICATION_CREDENTIALS, gcloud's application-default file, then the metadata
server, which is how GKE Workload Identity answers for a pod whose ServiceAccount carries
`iam.gke.io/gcp-service-account` (cloud.google.com/kubernetes-engine/docs/how-to/
workload-identity). `SourceOptions.gcs_anonymous` sends unauthenticated requests (public
buckets) and looks for no credentials. The endpoint is `SourceOptions.gcs_endpoint_url`,
else STORAGE_EMULATOR_HOST (read by the library, which then also sends no credentials:
google/cloud/storage/client.py), else storage.googleapis.com.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

from podserve.storage.errors import (
    FetchNetworkError,
    MissingExtra,
    ModelNotFoundAtSource,
    SourceAccessDenied,
    StorageError,
)
from podserve.storage.fetchers.base import StagingArea, write_all
from podserve.storage.progress import Progress
from podserve.storage.uri import ModelURI

if TYPE_CHECKING:
    from google.api_core.exceptions import GoogleAPICallError


@dataclass(frozen=True, slots=True)
class _Object:
    name: str
    rel: str
    size_bytes: int
    generation: str


class _Sink:
    """What the library writes a download into: the partial file, counted for progress."""

    __slots__ = ("_out", "_progress", "_rel")

    def __init__(self, out: BinaryIO, progress: Progress, rel: str) -> None:
        self._out = out
        self._progress = progress
        self._rel = rel

    def write(self, chunk: bytes) -> int:
        write_all(self._out, chunk)
        self._progress.file_advanced(self._rel, len(chunk))
        return len(chunk)


class GcsFetcher:
    __slots__ = ("_anonymous", "_endpoint_url", "_timeout_s")

    def __init__(
        self, *, endpoint_url: str | None = None, anonymous: bool = False, timeout_s: float = 60.0
    ) -> None:
        self._endpoint_url = endpoint_url
        self._anonymous = anonymous
        self._timeout_s = timeout_s

    def _client(self) -> Any:
        try:
            import google.cloud.storage as gcs
            from google.auth.credentials import AnonymousCredentials
        except ImportError as exc:
            raise MissingExtra(scheme="gs", extra="gcs", module="google-cloud-storage") from exc
        options = {"api_endpoint": self._endpoint_url} if self._endpoint_url else None
        # google-auth ships py.typed, but this constructor has no annotations.
        credentials = AnonymousCredentials() if self._anonymous else None  # type: ignore[no-untyped-call]
        # project=None: a download needs no project, and inferring one may ask the
        # metadata server for it.
        return gcs.Client(project=None, credentials=credentials, client_options=options)

    def _retry(self) -> Any:
        # The library's default retries transient errors for 120 s; --timeout-s bounds it.
        from google.cloud.storage.retry import DEFAULT_RETRY

        return DEFAULT_RETRY.with_timeout(self._timeout_s)

    def fetch(self, uri: ModelURI, staging: StagingArea, progress: Progress) -> None:
        try:
            import requests
            from google.api_core import exceptions as api
            from google.auth import exceptions as auth
        except ImportError as exc:
            raise MissingExtra(scheme="gs", extra="gcs", module="google-cloud-storage") from exc
        try:
            client = self._client()
            objects = self._list(client, uri)
            staging.prune({o.rel for o in objects})
            bucket = client.bucket(uri.bucket)
            for obj in objects:
                self._download(bucket, obj, staging, progress)
        except auth.DefaultCredentialsError as exc:
            if self._anonymous:
                # A 401 makes the library refresh the credentials, which anonymous ones
                # cannot (google/auth/credentials.py, AnonymousCredentials.refresh): Cloud
                # Storage answers anonymous callers of a private bucket with 401.
                raise SourceAccessDenied(
                    f"{uri}: 401: the bucket refuses anonymous reads; drop --gcs-anonymous "
                    "and give the pod credentials (Workload Identity or "
                    "GOOGLE_APPLICATION_CREDENTIALS)"
                ) from exc
            raise SourceAccessDenied(
                f"{uri}: no Google credentials found ({exc}); give the pod Workload Identity "
                "(credentials.gcpServiceAccount) or GOOGLE_APPLICATION_CREDENTIALS, or "
                "--gcs-anonymous for a public bucket"
            ) from exc
        except auth.RefreshError as exc:
            raise SourceAccessDenied(
                f"{uri}: the credentials could not be exchanged for a token ({exc})"
            ) from exc
        except api.GoogleAPICallError as exc:
            raise _api_error(str(uri), exc) from exc
        except (auth.TransportError, api.RetryError, requests.RequestException, OSError) as exc:
            raise FetchNetworkError(
                f"network error fetching {uri}: {exc}; a retry resumes the download"
            ) from exc

    def _list(self, client: Any, uri: ModelURI) -> list[_Object]:
        bucket, key = uri.bucket, uri.key
        if key:
            # None for a missing object (and for a missing bucket: the listing says which).
            blob = client.bucket(bucket).get_blob(key, timeout=self._timeout_s, retry=self._retry())
            if blob is not None:
                return [_Object(key, key.rsplit("/", 1)[-1], int(blob.size), str(blob.generation))]
        prefix = f"{key}/" if key else ""
        objects = [
            _Object(blob.name, blob.name[len(prefix) :], int(blob.size), str(blob.generation))
            for blob in client.list_blobs(
                bucket, prefix=prefix, timeout=self._timeout_s, retry=self._retry()
            )
            if not blob.name.endswith("/")
        ]
        if not objects:
            raise ModelNotFoundAtSource(
                f"{uri}: no such object, and no objects under gs://{bucket}/{prefix}"
            )
        return objects

    def _download(
        self, bucket: Any, obj: _Object, staging: StagingArea, progress: Progress
    ) -> None:
        from google.cloud.storage.exceptions import DataCorruption

        part = staging.partial(obj.rel)
        if part.is_complete(obj.generation):
            return
        offset = part.resume_offset(obj.generation)
        if offset > obj.size_bytes:
            offset = 0
        progress.file_started(obj.rel, obj.size_bytes, offset)
        where = f"gs://{bucket.name}/{obj.name}"
        blob = bucket.blob(obj.name)
        with part.open(offset=offset, validator=obj.generation) as out:
            if offset < obj.size_bytes:
                try:
                    blob.download_to_file(
                        _Sink(out, progress, obj.rel),
                        start=offset or None,
                        # The stored bytes, never decompressive transcoding: their size
                        # is the listed one and a range means the same bytes.
                        raw_download=True,
                        if_generation_match=int(obj.generation),
                        # The library checks the whole object's crc32c; a resumed read
                        # has only a tail to check, and the digest covers the rest.
                        checksum="auto" if offset == 0 else None,
                        timeout=self._timeout_s,
                        retry=self._retry(),
                    )
                except DataCorruption as exc:
                    part.discard()
                    raise FetchNetworkError(
                        f"{where}: the bytes received fail the object's checksum ({exc}); "
                        "a retry downloads it again"
                    ) from exc
            written = out.tell()
        served = blob.generation
        if served is not None and str(served) != obj.generation:
            part.discard()
            raise FetchNetworkError(
                f"{where}: generation {served} was served, {obj.generation} was listed: the "
                "object changed during the download; a retry starts it again"
            )
        if written != obj.size_bytes:
            raise FetchNetworkError(
                f"{where}: the transfer ended at {written} of {obj.size_bytes} bytes; "
                "a retry resumes it"
            )
        part.complete()
        progress.file_finished(obj.rel)


def _api_error(where: str, exc: GoogleAPICallError) -> StorageError:
    code = exc.code or 0
    detail = f"{where}: {code} {exc.message}".rstrip()
    if code == 404:
        return ModelNotFoundAtSource(detail)
    if code in (401, 403):
        return SourceAccessDenied(
            f"{detail}; check the credentials (Workload Identity's Google service account "
            "needs roles/storage.objectViewer on the bucket)"
        )
    if code == 412:
        return FetchNetworkError(
            f"{detail}: the object changed during the download; a retry starts it again"
        )
    if code >= 500 or code in (408, 429):
        return FetchNetworkError(f"{detail}; retrying may work")
    return StorageError(detail)
