"""models:/ and runs:/ sources: an MLflow tracking server's registry and runs.

resolve (alias or `latest` → a version number) → the version's or run's artefact URI →
download every file under it into staging.

`resolve` runs before the cache is keyed (fetch.py), so `models:/m@champion` is cached as
the version the alias points at *now*: moving the alias makes the next fetch download the
new version, while a model version, which MLflow never changes, is fetched once. The
tracking server is part of the key, so equal names on two servers never share an entry.

Artefact stores, as `mlflow server` hands them out:
  mlflow-artifacts:/...   proxied by the tracking server (`--serve-artifacts`, the default
                          since MLflow 2.0): listed and downloaded over its REST API, each
                          file resumed with a Range request (the server sends ETags)
  s3://bucket/prefix      fetched directly with the s3 fetcher (`--s3-endpoint-url`)
  file:///path, /path     a store on a disk this process also sees (one machine, a shared
                          volume); otherwise run the server with --serve-artifacts
A `runs:/<run>/<name>` that names a model logged with MLflow 3's `log_model` finds it where
MLflow 3 stores it, as a logged model of the run (`runs_artifact_repo.py`,
`_get_logged_model_artifact_repo`).

The tracking URI and token come from SourceOptions, else from MLFLOW_TRACKING_URI and
MLFLOW_TRACKING_TOKEN, the variables the mlflow client itself reads (as the s3 and hf
fetchers leave AWS_* and HF_* to their libraries).
"""

from __future__ import annotations

import os
import urllib.error
from urllib.parse import unquote, urlsplit

from podserve.storage.errors import (
    FetchNetworkError,
    InvalidModelURI,
    ModelNotFoundAtSource,
    StorageError,
)
from podserve.storage.fetchers.base import SourceOptions, StagingArea
from podserve.storage.fetchers.http import HttpFetcher
from podserve.storage.fetchers.local import LocalFetcher
from podserve.storage.fetchers.s3 import S3Fetcher
from podserve.storage.mlflow_rest import MlflowRest, http_error, list_of, object_of
from podserve.storage.mlflow_uri import (
    RegisteredAlias,
    RegisteredVersion,
    RunArtifacts,
    mlflow_ref,
)
from podserve.storage.progress import Phase, Progress
from podserve.storage.uri import ModelURI, Scheme

_READY = "READY"


class MlflowFetcher:
    __slots__ = ("_options",)

    def __init__(self, options: SourceOptions) -> None:
        self._options = options

    # -- resolve: what the URI names now ----------------------------------------------

    def resolve(self, uri: ModelURI) -> ModelURI:
        """`uri` with an alias or `latest` replaced by the version number it names now, and
        the tracking server recorded in `revision`."""
        rest = self._client()
        ref = mlflow_ref(uri.scheme.value, uri.location)
        if isinstance(ref, RegisteredAlias | RegisteredVersion):
            version = _version_of(rest, ref)
            location = f"{ref.name}/{version}"
        else:
            location = uri.location
        return ModelURI(uri.scheme, location, revision=rest.base_url, pinned=uri.pinned)

    # -- fetch ------------------------------------------------------------------------

    def fetch(self, uri: ModelURI, staging: StagingArea, progress: Progress) -> None:
        rest = self._client()
        ref = mlflow_ref(uri.scheme.value, uri.location)
        if isinstance(ref, RunArtifacts):
            self._fetch_run(rest, ref, staging, progress)
            return
        name, version = ref.name, _version_of(rest, ref)
        where = f"models:/{name}/{version}"
        found = object_of(
            rest.get("mlflow/model-versions/get", name=name, version=version),
            "model_version",
            where,
        )
        status = str(found.get("status", _READY))
        if status == "PENDING_REGISTRATION":
            raise FetchNetworkError(f"{where} is still being registered; retry shortly")
        if status != _READY:
            raise ModelNotFoundAtSource(f"{where} is {status}, not READY")
        answer = rest.get("mlflow/model-versions/get-download-uri", name=name, version=version)
        root = str(answer.get("artifact_uri", ""))
        if not root:
            raise FetchNetworkError(f"MLflow gave no artifact URI for {where}")
        progress.phase(Phase.DOWNLOADING, f"{where} from {root}")
        self._download_root(rest, root, staging, progress)

    def _fetch_run(
        self, rest: MlflowRest, ref: RunArtifacts, staging: StagingArea, progress: Progress
    ) -> None:
        where = f"runs:/{ref.run_id}/{ref.path}"
        info = object_of(
            object_of(rest.get("mlflow/runs/get", run_id=ref.run_id), "run", where), "info", where
        )
        run_root = _join(str(info.get("artifact_uri", "")), ref.path)
        try:
            progress.phase(Phase.DOWNLOADING, f"{where} from {run_root}")
            self._download_root(rest, run_root, staging, progress)
        except ModelNotFoundAtSource:
            model_root = _logged_model_root(rest, ref, str(info.get("experiment_id", "")))
            if model_root is None:
                raise ModelNotFoundAtSource(
                    f"{where}: nothing at {run_root}, and the run logged no model named "
                    f"{ref.path.partition('/')[0]!r}"
                ) from None
            progress.phase(Phase.DOWNLOADING, f"{where} (a logged model) from {model_root}")
            self._download_root(rest, model_root, staging, progress)

    def _download_root(
        self, rest: MlflowRest, root: str, staging: StagingArea, progress: Progress
    ) -> None:
        parts = urlsplit(root)
        scheme = parts.scheme.lower()
        if scheme == "mlflow-artifacts":
            path = unquote(parts.path).strip("/")
            _download_proxied(rest, path, staging, progress, self._options)
        elif scheme == "s3":
            s3 = S3Fetcher(endpoint_url=self._options.s3_endpoint_url, timeout_s=self._timeout_s)
            location = f"{parts.netloc}{parts.path}".rstrip("/")
            s3.fetch(ModelURI(Scheme.S3, location), staging, progress)
        elif scheme in ("", "file"):
            path = unquote(parts.path)
            if not os.path.exists(path):
                raise ModelNotFoundAtSource(
                    f"MLflow keeps these artefacts at {root}, on a disk this machine does not "
                    "see; run `mlflow server` with --serve-artifacts (its default) so that "
                    "they are served over HTTP"
                )
            LocalFetcher().fetch(ModelURI(Scheme.FILE, path), staging, progress)
        else:
            raise StorageError(
                f"MLflow keeps these artefacts at {root}; podserve fetches mlflow-artifacts:/ "
                "(the tracking server's proxy), s3:// and local paths: run `mlflow server "
                "--serve-artifacts` in front of this store"
            )

    @property
    def _timeout_s(self) -> float:
        return self._options.timeout_s

    def _client(self) -> MlflowRest:
        opts = self._options
        tracking_uri = opts.mlflow_tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if not tracking_uri:
            raise InvalidModelURI(
                "models:/ and runs:/ URIs need an MLflow tracking server: "
                "--mlflow-uri or MLFLOW_TRACKING_URI"
            )
        token = opts.mlflow_token or os.environ.get("MLFLOW_TRACKING_TOKEN")
        return MlflowRest(tracking_uri, token=token, timeout_s=opts.timeout_s)


def _version_of(rest: MlflowRest, ref: RegisteredAlias | RegisteredVersion) -> str:
    if isinstance(ref, RegisteredAlias):
        where = f"models:/{ref.name}@{ref.alias}"
        try:
            doc = rest.get("mlflow/registered-models/alias", name=ref.name, alias=ref.alias)
        except StorageError as exc:
            # MLflow answers an unknown alias with 400 INVALID_PARAMETER_VALUE
            # ("Registered model alias ... not found"), not 404.
            if "not found" in exc.message:
                raise ModelNotFoundAtSource(f"{where}: {exc.message}") from exc
            raise
        return str(object_of(doc, "model_version", where).get("version", ""))
    if ref.version != "latest":
        return ref.version
    # A quote would end the filter's string literal (MLflow's search grammar).
    if "'" in ref.name:
        raise InvalidModelURI(f"models:/{ref.name}/latest: a name with ' cannot be searched")
    doc = rest.get("mlflow/model-versions/search", filter=f"name='{ref.name}'")
    versions = [
        int(v["version"])
        for v in list_of(doc, "model_versions")
        if str(v.get("version", "")).isdigit() and v.get("status", _READY) == _READY
    ]
    if not versions:
        raise ModelNotFoundAtSource(f"models:/{ref.name}/latest: the model has no READY version")
    return str(max(versions))


def _download_proxied(
    rest: MlflowRest, root: str, staging: StagingArea, progress: Progress, options: SourceOptions
) -> None:
    files = rest.list_proxied(root)
    if not files:
        raise ModelNotFoundAtSource(f"MLflow has no artefacts under mlflow-artifacts:/{root}")
    staging.prune({f.rel for f in files})
    downloader = HttpFetcher(timeout_s=options.timeout_s, opener=rest.opener)
    for item in files:
        part = staging.partial(item.rel)
        if part.final.is_file() and part.final.stat().st_size == item.size_bytes:
            continue  # finished by an earlier, interrupted fetch
        url = rest.proxied_url(f"{root}/{item.rel}")
        try:
            # The http fetcher's resumable download (Range + If-Range on the ETag).
            downloader._download(url, item.rel, part, progress, allow_restart=True)
        except urllib.error.HTTPError as exc:
            with exc:
                raise http_error(url, exc.code, exc.read()) from None
        except OSError as exc:
            raise FetchNetworkError(
                f"network error fetching {url}: {exc}; a retry resumes the download"
            ) from exc


def _logged_model_root(rest: MlflowRest, ref: RunArtifacts, experiment_id: str) -> str | None:
    """The artefact URI of the model the run logged as `ref.path`'s first segment
    (MLflow 3 stores `log_model` output as a logged model, outside the run's artefacts)."""
    name, _, below = ref.path.partition("/")
    if not name or "'" in name or not experiment_id:
        return None
    token: str | None = None
    while True:
        body: dict[str, object] = {"experiment_ids": [experiment_id], "filter": f"name = '{name}'"}
        if token:
            body["page_token"] = token
        doc = rest.post("mlflow/logged-models/search", body)
        for model in list_of(doc, "models"):
            info = model.get("info")
            if isinstance(info, dict) and info.get("source_run_id") == ref.run_id:
                return _join(str(info.get("artifact_uri", "")), below)
        token = str(doc.get("next_page_token") or "") or None
        if token is None:
            return None


def _join(root: str, path: str) -> str:
    return f"{root.rstrip('/')}/{path}" if path else root
