"""gs:// sources through google-cloud-storage (the `[gcs]` extra).

`gs://bucket/key` fetches that one object when it exists, else every object under `key/`
as a directory (names ending in `/`, the folder placeholders the Cloud console writes, are
skipped), the shape every object store shares (fetchers/object_store.py), as in KServe's
`_download_gcs` (kserve/kserve python/storage/kserve_storage/kserve_storage.py).

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

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from podserve.storage.errors import (
    FetchNetworkError,
    MissingExtra,
    ModelNotFoundAtSource,
    SourceAccessDenied,
    StorageError,
)
from podserve.storage.fetchers.base import StagingArea
from podserve.storage.fetchers.object_store import (
    Listed,
    ObjectSink,
    StoredObject,
    copy_object,
    select_objects,
)
from podserve.storage.progress import Progress
from podserve.storage.uri import ModelURI

if TYPE_CHECKING:
    from google.api_core.exceptions import GoogleAPICallError


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
            objects = select_objects(
                uri.key,
                head=lambda key: self._head(client, uri.bucket, key),
                list_under=lambda prefix: self._list_under(client, uri.bucket, prefix),
                missing=lambda prefix: ModelNotFoundAtSource(
                    f"{uri}: no such object, and no objects under gs://{uri.bucket}/{prefix}"
                ),
            )
            staging.prune({o.rel for o in objects})
            bucket = client.bucket(uri.bucket)
            for obj in objects:
                copy_object(
                    obj,
                    staging,
                    progress,
                    where=f"gs://{bucket.name}/{obj.name}",
                    read=lambda o, offset, sink: self._read(bucket, o, offset, sink),
                )
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

    def _head(self, client: Any, bucket: str, key: str) -> Listed | None:
        # None for a missing object (and for a missing bucket: the listing says which).
        blob = client.bucket(bucket).get_blob(key, timeout=self._timeout_s, retry=self._retry())
        return None if blob is None else Listed(key, int(blob.size), str(blob.generation))

    def _list_under(self, client: Any, bucket: str, prefix: str) -> Iterable[Listed]:
        for blob in client.list_blobs(
            bucket, prefix=prefix, timeout=self._timeout_s, retry=self._retry()
        ):
            yield Listed(blob.name, int(blob.size), str(blob.generation))

    def _read(self, bucket: Any, obj: StoredObject, offset: int, sink: ObjectSink) -> None:
        from google.cloud.storage.exceptions import DataCorruption

        where = f"gs://{bucket.name}/{obj.name}"
        blob = bucket.blob(obj.name)
        try:
            blob.download_to_file(
                sink,
                start=offset or None,
                # The stored bytes, never decompressive transcoding: their size is the
                # listed one and a range means the same bytes.
                raw_download=True,
                if_generation_match=int(obj.validator),
                # The library checks the whole object's crc32c; a resumed read has only a
                # tail to check, and the digest covers the rest.
                checksum="auto" if offset == 0 else None,
                timeout=self._timeout_s,
                retry=self._retry(),
            )
        except DataCorruption as exc:
            sink.discard()
            raise FetchNetworkError(
                f"{where}: the bytes received fail the object's checksum ({exc}); "
                "a retry downloads it again"
            ) from exc
        served = blob.generation
        if served is not None and str(served) != obj.validator:
            sink.discard()
            raise FetchNetworkError(
                f"{where}: generation {served} was served, {obj.validator} was listed: the "
                "object changed during the download; a retry starts it again"
            )


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
