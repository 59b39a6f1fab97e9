"""A small client for the MLflow tracking server's REST API: just what resolving a model
URI to its artefacts needs, over urllib (no `mlflow` package at run time).

Endpoints (https://mlflow.org/docs/latest/api_reference/rest-api.html, and the routes in
`mlflow/server/handlers.py`):

    GET  /api/2.0/mlflow/registered-models/alias?name&alias      -> model_version
    GET  /api/2.0/mlflow/model-versions/get?name&version         -> model_version
    GET  /api/2.0/mlflow/model-versions/search?filter            -> model_versions
    GET  /api/2.0/mlflow/model-versions/get-download-uri         -> artifact_uri
    GET  /api/2.0/mlflow/runs/get?run_id                         -> run.info.artifact_uri
    POST /api/2.0/mlflow/logged-models/search                    -> models (MLflow 3)
    GET  /api/2.0/mlflow-artifacts/artifacts?path                -> files (proxied store)
    GET  /api/2.0/mlflow-artifacts/artifacts/<path>              -> the file (Range works)

Credentials as the mlflow client takes them (`mlflow/utils/rest_utils.py`): a bearer
token (MLFLOW_TRACKING_TOKEN), else basic auth in the URL's userinfo.
"""

from __future__ import annotations

import base64
import http.client
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import orjson

from podserve.storage.errors import (
    FetchNetworkError,
    InvalidModelURI,
    ModelNotFoundAtSource,
    SourceAccessDenied,
    StorageError,
)

# MLflow's error codes (mlflow/protos/databricks.proto) that mean "no such thing".
_NOT_FOUND_CODES = frozenset({"RESOURCE_DOES_NOT_EXIST", "NOT_FOUND"})


@dataclass(frozen=True, slots=True)
class ArtifactFile:
    """A file under a proxied artefact directory; `rel` is relative to the model's root."""

    rel: str
    size_bytes: int | None


class _AuthHeaders(urllib.request.BaseHandler):
    """Adds the credentials to every request the opener sends (downloads too)."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self._headers = dict(headers)

    def http_request(self, request: urllib.request.Request) -> urllib.request.Request:
        for name, value in self._headers.items():
            request.add_unredirected_header(name, value)
        return request

    https_request = http_request


class MlflowRest:
    __slots__ = ("_base", "_timeout_s", "base_url", "opener")

    def __init__(self, tracking_uri: str, *, token: str | None, timeout_s: float) -> None:
        parts = urlsplit(tracking_uri.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidModelURI(
                f"MLflow tracking URI {tracking_uri!r} must be http(s)://host[:port]; "
                "set --mlflow-uri or MLFLOW_TRACKING_URI"
            )
        headers: dict[str, str] = {}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        elif parts.username is not None:
            pair = f"{parts.username}:{parts.password or ''}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        # Shown in errors and cache keys: never the credentials.
        self.base_url = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
        self._base = self.base_url
        self._timeout_s = timeout_s
        self.opener = urllib.request.build_opener(_AuthHeaders(headers))

    def get(self, endpoint: str, **params: str) -> dict[str, Any]:
        query = f"?{urlencode(params)}" if params else ""
        return self._call(urllib.request.Request(f"{self._base}/api/2.0/{endpoint}{query}"))

    def post(self, endpoint: str, body: Mapping[str, object]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self._base}/api/2.0/{endpoint}",
            data=orjson.dumps(body),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        return self._call(request)

    def proxied_url(self, path: str) -> str:
        return f"{self._base}/api/2.0/mlflow-artifacts/artifacts/{quote(path)}"

    def list_proxied(self, root: str) -> list[ArtifactFile]:
        """Every file under `root` of the server's proxied artefact store, recursively."""
        found: list[ArtifactFile] = []
        pending = [""]
        while pending:
            sub = pending.pop()
            path = f"{root}/{sub}" if sub else root
            listing = self.get("mlflow-artifacts/artifacts", path=path)
            for item in list_of(listing, "files"):
                name = str(item.get("path", ""))
                rel = f"{sub}/{name}" if sub else name
                if item.get("is_dir"):
                    pending.append(rel)
                else:
                    size = item.get("file_size")
                    found.append(ArtifactFile(rel, int(size) if size is not None else None))
        return sorted(found, key=lambda f: f.rel)

    def _call(self, request: urllib.request.Request) -> dict[str, Any]:
        where = request.full_url.split("?", 1)[0]
        try:
            with self.opener.open(request, timeout=self._timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                raise http_error(where, exc.code, exc.read()) from None
        except (OSError, http.client.HTTPException) as exc:
            raise FetchNetworkError(f"cannot reach the MLflow server at {where}: {exc}") from exc
        try:
            doc = orjson.loads(raw) if raw.strip() else {}
        except orjson.JSONDecodeError as exc:
            raise FetchNetworkError(f"{where} answered with something not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise FetchNetworkError(f"{where} answered {type(doc).__name__}, not a JSON object")
        return doc


def http_error(where: str, status: int, body: bytes) -> StorageError:
    """The storage error for an MLflow error response (`{"error_code", "message"}`)."""
    code, message = "", body.decode("utf-8", "replace")[:300]
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict):
        code = str(doc.get("error_code", ""))
        message = str(doc.get("message", message))
    text = f"MLflow {where}: HTTP {status} {code} {message}".rstrip()
    if status == 404 or code in _NOT_FOUND_CODES:
        return ModelNotFoundAtSource(text)
    if status in (401, 403):
        return SourceAccessDenied(f"{text}; check MLFLOW_TRACKING_TOKEN")
    if status in (408, 429) or status >= 500:
        return FetchNetworkError(f"{text}; retrying may work")
    return StorageError(text)


def object_of(doc: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = doc.get(key)
    if not isinstance(value, dict):
        raise FetchNetworkError(f"MLflow answered without {key!r} for {where}")
    return value


def list_of(doc: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    """`doc[key]` as a list of objects; MLflow omits empty lists from its JSON."""
    value = doc.get(key, [])
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
