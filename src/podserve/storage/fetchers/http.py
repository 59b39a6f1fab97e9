"""http(s):// sources: one file, resumed with a Range request.

The file's name in the model is the last segment of the URL's path, so its digest is the
same as `podserve digest` of that file downloaded by hand. A resume sends
`If-Range: <validator>`, so that a server whose file changed answers with the whole new
file (200) instead of a tail that would not fit the bytes already kept.
"""

from __future__ import annotations

import http.client
import re
import urllib.error
import urllib.request
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

from podserve.storage.errors import (
    FetchNetworkError,
    ModelNotFoundAtSource,
    SourceAccessDenied,
    StorageError,
)
from podserve.storage.fetchers.base import CHUNK_BYTES, PartialFile, StagingArea, write_all
from podserve.storage.progress import Progress
from podserve.storage.uri import ModelURI

_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


def file_name_of(url: str) -> str:
    name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    return name if name not in ("", ".", "..") else "model"


class HttpFetcher:
    __slots__ = ("_opener", "_timeout_s")

    def __init__(
        self, *, timeout_s: float = 60.0, opener: urllib.request.OpenerDirector | None = None
    ) -> None:
        self._timeout_s = timeout_s
        self._opener = opener or urllib.request.build_opener()

    def fetch(self, uri: ModelURI, staging: StagingArea, progress: Progress) -> None:
        name = file_name_of(uri.location)
        staging.prune({name})
        part = staging.partial(name)
        if part.is_complete(None):
            return
        try:
            self._download(uri.location, name, part, progress, allow_restart=True)
        except StorageError:
            raise
        except urllib.error.HTTPError as exc:
            raise _http_error(uri.location, exc.code, exc.reason) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise FetchNetworkError(
                f"network error fetching {uri.location}: {exc}; a retry resumes the download"
            ) from exc

    def _download(
        self, url: str, name: str, part: PartialFile, progress: Progress, *, allow_restart: bool
    ) -> None:
        saved = part.saved_validator()
        offset = part.resume_offset(None)
        request = urllib.request.Request(url, method="GET")
        if offset:
            request.add_header("Range", f"bytes={offset}-")
            if saved:
                request.add_header("If-Range", saved)
        try:
            response = self._opener.open(request, timeout=self._timeout_s)
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and allow_restart:
                # What we kept is not a prefix of the file (it shrank): start over.
                exc.close()
                part.discard()
                self._download(url, name, part, progress, allow_restart=False)
                return
            raise
        with response:
            validator = _validator(response)
            if response.status == 206:
                start, total = _content_range(response.headers.get("Content-Range", ""))
                if start != offset:
                    raise FetchNetworkError(
                        f"{url}: asked for bytes from {offset}, the server sent from {start}"
                    )
            else:
                offset = 0  # 200: the whole file, whatever we asked for
                length = response.headers.get("Content-Length")
                total = int(length) if length and length.isdigit() else None
            progress.file_started(name, total, offset)
            with part.open(offset=offset, validator=validator) as out:
                written = offset + _copy(response, out, name, progress)
        if total is not None and written != total:
            raise FetchNetworkError(
                f"{url}: the transfer ended at {written} of {total} bytes; a retry resumes it"
            )
        part.complete()
        progress.file_finished(name)


def _copy(response: http.client.HTTPResponse, out: BinaryIO, name: str, progress: Progress) -> int:
    n = 0
    # read1: whatever has arrived, up to a chunk, so that bytes reach the disk as they
    # come rather than when a whole chunk has (a kill loses at most what is in flight).
    while chunk := response.read1(CHUNK_BYTES):
        write_all(out, chunk)
        n += len(chunk)
        progress.file_advanced(name, len(chunk))
    return n


def _validator(response: http.client.HTTPResponse) -> str | None:
    etag = response.headers.get("ETag")
    # A weak ETag may not be used in If-Range (RFC 9110 13.1.5).
    if etag and not etag.startswith("W/"):
        return str(etag)
    modified = response.headers.get("Last-Modified")
    return str(modified) if modified else None


def _content_range(value: str) -> tuple[int, int | None]:
    match = _CONTENT_RANGE.match(value.strip())
    if match is None:
        raise FetchNetworkError(f"unreadable Content-Range {value!r} in a 206 response")
    total = match.group(3)
    return int(match.group(1)), None if total == "*" else int(total)


def _http_error(url: str, code: int, reason: object) -> StorageError:
    if code in (404, 410):
        return ModelNotFoundAtSource(f"{url}: HTTP {code} {reason}")
    if code in (401, 403):
        return SourceAccessDenied(f"{url}: HTTP {code} {reason}; check the credentials")
    if code in (408, 429) or code >= 500:
        return FetchNetworkError(f"{url}: HTTP {code} {reason}; retrying may work")
    return StorageError(f"{url}: HTTP {code} {reason}")
