"""s3:// sources through boto3 (the `[s3]` extra), for AWS and S3-compatible stores.

`s3://bucket/key` fetches that one object when it exists, else every object under
`key/` as a directory (keys ending in `/`, the "folder" markers some tools write, are
skipped). Each object is fetched with a ranged GET from where an earlier attempt stopped,
with `If-Match: <ETag from the listing>`, so a resume never splices two versions.

The endpoint comes from `SourceOptions.s3_endpoint_url`, else boto3's own settings
(AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, a profile); credentials from boto3's chain.
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
from podserve.storage.fetchers.base import CHUNK_BYTES, StagingArea
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
    from mypy_boto3_s3 import S3Client

_NOT_FOUND = {"404", "NoSuchKey", "NoSuchBucket", "NotFound"}
_DENIED = {
    "401",
    "403",
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
}


class S3Fetcher:
    __slots__ = ("_endpoint_url", "_timeout_s")

    def __init__(self, *, endpoint_url: str | None = None, timeout_s: float = 60.0) -> None:
        self._endpoint_url = endpoint_url
        self._timeout_s = timeout_s

    def _client(self) -> S3Client:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise MissingExtra(scheme="s3", extra="s3", module="boto3") from exc
        config = Config(
            connect_timeout=self._timeout_s,
            read_timeout=self._timeout_s,
            retries={"mode": "standard", "max_attempts": 3},
        )
        return boto3.client("s3", endpoint_url=self._endpoint_url, config=config)

    def fetch(self, uri: ModelURI, staging: StagingArea, progress: Progress) -> None:
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        client = self._client()
        bucket = uri.bucket
        try:
            objects = select_objects(
                uri.key,
                head=lambda key: _head(client, bucket, key),
                list_under=lambda prefix: _list_under(client, bucket, prefix),
                missing=lambda prefix: ModelNotFoundAtSource(
                    f"{uri}: no such object, and no objects under s3://{bucket}/{prefix}"
                ),
            )
            staging.prune({o.rel for o in objects})
            for obj in objects:
                copy_object(
                    obj,
                    staging,
                    progress,
                    where=f"s3://{bucket}/{obj.name}",
                    read=lambda o, offset, sink: _read(client, bucket, o, offset, sink),
                )
        except NoCredentialsError as exc:
            raise SourceAccessDenied(f"{uri}: no AWS credentials found ({exc})") from exc
        except ClientError as exc:
            raise _client_error(str(uri), exc.response) from exc
        except (BotoCoreError, OSError) as exc:
            raise FetchNetworkError(
                f"network error fetching {uri}: {exc}; a retry resumes the download"
            ) from exc


def _head(client: S3Client, bucket: str, key: str) -> Listed | None:
    from botocore.exceptions import ClientError

    try:
        head = client.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if _code(exc.response) not in _NOT_FOUND:
            raise
        return None
    return Listed(key, head["ContentLength"], head["ETag"])


def _list_under(client: S3Client, bucket: str, prefix: str) -> Iterable[Listed]:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            yield Listed(item["Key"], item["Size"], item["ETag"])


def _read(client: S3Client, bucket: str, obj: StoredObject, offset: int, sink: ObjectSink) -> None:
    # If-Match: an object replaced since the listing answers 412, never other bytes.
    kwargs: dict[str, Any] = {"Bucket": bucket, "Key": obj.name, "IfMatch": obj.validator}
    if offset:
        kwargs["Range"] = f"bytes={offset}-"
    body = client.get_object(**kwargs)["Body"]
    try:
        for chunk in body.iter_chunks(CHUNK_BYTES):
            sink.write(chunk)
    finally:
        body.close()


def _code(response: Any) -> str:
    error = response.get("Error", {}) if isinstance(response, dict) else {}
    return str(error.get("Code", ""))


def _client_error(where: str, response: Any) -> StorageError:
    code = _code(response)
    message = response.get("Error", {}).get("Message", "") if isinstance(response, dict) else ""
    status = (
        response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if isinstance(response, dict)
        else 0
    )
    detail = f"{where}: {code} {message}".rstrip()
    if code in _NOT_FOUND:
        return ModelNotFoundAtSource(detail)
    if code in _DENIED:
        return SourceAccessDenied(f"{detail}; check the credentials")
    if code in ("PreconditionFailed", "412"):
        return FetchNetworkError(
            f"{detail}: the object changed during the download; a retry starts it again"
        )
    if (isinstance(status, int) and status >= 500) or code in ("SlowDown", "RequestTimeout"):
        return FetchNetworkError(f"{detail}; retrying may work")
    return StorageError(detail)
