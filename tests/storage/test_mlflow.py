"""models:/ and runs:/ URIs against a real `mlflow server` (SQLite backend, local artefact
root proxied by the server, as `mlflow server` runs by default) on 127.0.0.1.

The server starts once for the module (it takes seconds). The models are logged and
registered by the `mlflow` client in a child process, so that this process never imports
mlflow (its import-time warnings would trip `filterwarnings = error`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from podserve.config.model_config import ModelConfig
from podserve.core.errors import ModelLoadFailed
from podserve.repository.discovery import resolve_fetched
from podserve.storage import (
    DigestMismatch,
    InvalidModelURI,
    ModelNotFoundAtSource,
    Scheme,
    SourceAccessDenied,
    SourceOptions,
    fetch_model,
    parse_model_uri,
)
from podserve.storage.fetchers.base import StagingArea
from podserve.storage.fetchers.mlflow import MlflowFetcher
from podserve.storage.mlflow_model import read_mlmodel
from podserve.storage.progress import NullProgress
from tests.storage.support import spawn_fetch
from tests.support.server import ServerProcess, wait_until

pytestmark = pytest.mark.slow

_QUIET = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "PYTHONWARNINGS": "ignore",
    "GIT_PYTHON_REFRESH": "quiet",
}

# Logs two scikit-learn versions of "iris" (v1 predicts column 0 > 0.5, v2 column 1 > 0.5)
# and an ONNX conversion of v1 as plain run artefacts, and prints what it made.
_LOG_MODELS = textwrap.dedent(
    """
    import json, sys, tempfile
    import mlflow, mlflow.onnx, mlflow.sklearn, numpy as np
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression

    mlflow.set_tracking_uri(sys.argv[1])
    rng = np.random.default_rng(0)
    x = rng.random((200, 4))
    made = {}
    for version, column in ((1, 0), (2, 1)):
        model = LogisticRegression(C=100.0).fit(x, (x[:, column] > 0.5).astype(int))
        with mlflow.start_run() as run:
            mlflow.sklearn.log_model(
                model, name="model", registered_model_name="iris",
                pip_requirements=["scikit-learn"],
            )
        made[f"run{version}"] = run.info.run_id
        if version == 1:
            onx = to_onnx(model, x[:1].astype(np.float32), options={"zipmap": False})
            with mlflow.start_run() as run, tempfile.TemporaryDirectory() as tmp:
                mlflow.onnx.save_model(onx, f"{tmp}/m", pip_requirements=["onnxruntime"])
                mlflow.log_artifacts(f"{tmp}/m", artifact_path="onnx-model")
            made["onnx_run"] = run.info.run_id
    print(json.dumps(made))
    """
)


@dataclass(frozen=True)
class Registry:
    url: str
    run1: str
    run2: str
    onnx_run: str

    def set_alias(self, alias: str, version: int) -> None:
        response = httpx.post(
            f"{self.url}/api/2.0/mlflow/registered-models/alias",
            json={"name": "iris", "alias": alias, "version": str(version)},
        )
        response.raise_for_status()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    root = tmp_path_factory.mktemp("mlflow")
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    url = f"http://127.0.0.1:{_free_port()}"
    env = {**os.environ, **_QUIET}
    server = subprocess.Popen(
        [
            str(mlflow_bin), "server", "--host", "127.0.0.1", "--port", url.rsplit(":", 1)[1],
            "--workers", "1", "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
            "--artifacts-destination", str(root / "artifacts"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # its uvicorn worker goes with it at teardown
    )  # fmt: skip
    try:
        wait_until(lambda: _healthy(url), timeout_s=90, what="mlflow server /health")
        made = subprocess.run(
            [sys.executable, "-c", _LOG_MODELS, url],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
            check=False,
        )
        assert made.returncode == 0, made.stderr[-3000:]
        ids = json.loads(made.stdout.strip().splitlines()[-1])
        yield Registry(url, ids["run1"], ids["run2"], ids["onnx_run"])
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def _options(registry: Registry) -> SourceOptions:
    return SourceOptions(mlflow_tracking_uri=registry.url)


def _fetch_cli(registry: Registry, cache: Path, uri: str) -> tuple[int, str, str]:
    proc = spawn_fetch(uri, "--cache-dir", str(cache), "--mlflow-uri", registry.url)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out.strip(), err


def _model_id(path: Path) -> str:
    for line in (path / "MLmodel").read_text().splitlines():
        if line.startswith("model_id:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no model_id in {path / 'MLmodel'}")


# -- URIs ------------------------------------------------------------------------------


def test_uri_forms_parse() -> None:
    assert parse_model_uri("models:/iris/3").scheme is Scheme.MODELS
    assert parse_model_uri("models:/iris/3").location == "iris/3"
    assert parse_model_uri("models:/iris@champion").location == "iris@champion"
    assert parse_model_uri("models:/iris/latest").location == "iris/latest"
    runs = parse_model_uri("runs:/0123abc/model/sub")
    assert (runs.scheme, runs.location) == (Scheme.RUNS, "0123abc/model/sub")
    pinned = parse_model_uri("models:/iris@champion@sha256:" + "a" * 64)
    assert pinned.location == "iris@champion"
    assert str(pinned.pinned) == "sha256:" + "a" * 64
    assert str(pinned) == "models:/iris@champion@sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("models:/iris/Production", "stages are deprecated"),
        ("models://iris/1", "one slash"),
        ("models:/iris", "expected models:/<name>/<version>"),
        ("models:/", "expected models:/"),
        ("runs:/", "expected runs:/<run_id>/<path>"),
        ("runs:/abc/../x", "may not contain"),
    ],
)
def test_bad_uris_say_what_is_expected(text: str, says: str) -> None:
    with pytest.raises(InvalidModelURI, match=says):
        parse_model_uri(text)


def test_without_a_tracking_server_the_error_names_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(InvalidModelURI, match="MLFLOW_TRACKING_URI"):
        fetch_model("models:/iris/1", cache_dir=tmp_path)


# -- the registry ----------------------------------------------------------------------


def test_fetch_cli_downloads_a_version_into_the_cache(registry: Registry, tmp_path: Path) -> None:
    code, out, err = _fetch_cli(registry, tmp_path, "models:/iris/1")
    assert code == 0, err
    path = Path(out)
    assert path.is_relative_to(tmp_path / "entries")
    assert {p.name for p in path.iterdir()} >= {"MLmodel", "model.skops"}
    flavor = read_mlmodel(path)
    assert (flavor.flavor, flavor.runtime, flavor.artifact.name) == (
        "sklearn",
        "sklearn",
        "model.skops",
    )
    # A second fetch is a cache hit on the same entry.
    again = fetch_model("models:/iris/1", cache_dir=tmp_path, sources=_options(registry))
    assert again.from_cache
    assert again.path == path
    assert again.lease is not None
    again.lease.release()


def test_an_alias_moved_to_another_version_is_picked_up_on_the_next_fetch(
    registry: Registry, tmp_path: Path
) -> None:
    registry.set_alias("champion", 1)
    first = fetch_model("models:/iris@champion", cache_dir=tmp_path, sources=_options(registry))
    v1 = fetch_model("models:/iris/1", cache_dir=tmp_path, sources=_options(registry))
    assert first.path == v1.path  # the alias is cached as the version it names
    registry.set_alias("champion", 2)
    moved = fetch_model("models:/iris@champion", cache_dir=tmp_path, sources=_options(registry))
    assert not moved.from_cache
    assert moved.path != first.path
    assert _model_id(moved.path) != _model_id(first.path)
    latest = fetch_model("models:/iris/latest", cache_dir=tmp_path, sources=_options(registry))
    assert latest.path == moved.path
    for result in (first, v1, moved, latest):
        assert result.lease is not None
        result.lease.release()


class _Downloads(NullProgress):
    """Counts the files a fetch transfers (a warm, confirmed hit transfers none)."""

    def __init__(self) -> None:
        self.files: list[str] = []

    def file_started(self, name: str, total_bytes: int | None, resumed_bytes: int) -> None:
        self.files.append(name)


def test_a_digest_pin_refuses_the_model_the_alias_moved_to(
    registry: Registry, tmp_path: Path
) -> None:
    registry.set_alias("champion", 1)
    cache = tmp_path / "cache"
    v1 = fetch_model("models:/iris/1", cache_dir=tmp_path / "v1", sources=_options(registry))
    v2 = fetch_model("models:/iris/2", cache_dir=tmp_path / "v2", sources=_options(registry))
    for result in (v1, v2):
        assert result.lease is not None
        result.lease.release()
    uri = f"models:/iris@champion@{v1.digest}"
    code, out, err = _fetch_cli(registry, cache, uri)  # cold: downloads version 1
    assert code == 0, err
    warm = Path(out)

    # The alias has not moved: the warm entry is served without a download.
    seen = _Downloads()
    again = fetch_model(uri, cache_dir=cache, sources=_options(registry), progress=seen)
    assert (again.from_cache, again.path, seen.files) == (True, warm, [])
    assert again.lease is not None
    again.lease.release()

    # The alias moved to version 2: the node still holds the pinned bytes, and refuses.
    registry.set_alias("champion", 2)
    code, out, err = _fetch_cli(registry, cache, uri)
    assert code == 4, err  # EXIT_DIGEST_MISMATCH
    assert out == ""
    for named in ("models:/iris@champion", "models:/iris/2", "models:/iris/1", "digest mismatch"):
        assert named in err, (named, err)
    assert str(v1.digest) in err
    assert str(v2.digest) in err
    with pytest.raises(DigestMismatch, match="which now names models:/iris/2"):
        fetch_model(uri, cache_dir=cache, sources=_options(registry))
    # A cold node refuses the same way and publishes nothing.
    with pytest.raises(DigestMismatch, match=r"models:/iris@champion \(which now names"):
        fetch_model(uri, cache_dir=tmp_path / "cold", sources=_options(registry))
    assert not list((tmp_path / "cold").glob("entries/*"))

    # Back on version 1: served from the warm entry again, with no download.
    registry.set_alias("champion", 1)
    seen = _Downloads()
    back = fetch_model(uri, cache_dir=cache, sources=_options(registry), progress=seen)
    assert (back.path, seen.files) == (warm, [])
    assert back.lease is not None
    back.lease.release()


def test_a_pin_on_an_alias_accepts_another_version_with_the_same_bytes(
    registry: Registry, tmp_path: Path
) -> None:
    """Version 3 is registered from version 1's source: other version, same bytes. The
    first pinned fetch through the alias downloads it once to check, the next does not."""
    found = httpx.get(
        f"{registry.url}/api/2.0/mlflow/model-versions/get",
        params={"name": "iris", "version": "1"},
    ).json()["model_version"]
    # MLflow 3 registers a logged model (source models:/m-<id>) and wants its model_id.
    source = str(found["source"])
    created = httpx.post(
        f"{registry.url}/api/2.0/mlflow/model-versions/create",
        json={
            "name": "iris",
            "source": source,
            "run_id": found.get("run_id", ""),
            "model_id": source.removeprefix("models:/"),
        },
    )
    assert created.status_code == 200, created.text
    version = int(created.json()["model_version"]["version"])
    try:
        registry.set_alias("same", 1)
        cache = tmp_path / "cache"
        first = fetch_model("models:/iris@same", cache_dir=cache, sources=_options(registry))
        assert first.lease is not None
        first.lease.release()
        uri = f"models:/iris@same@{first.digest}"
        registry.set_alias("same", version)
        checked = _Downloads()
        ok = fetch_model(uri, cache_dir=cache, sources=_options(registry), progress=checked)
        assert checked.files  # version 3 was downloaded once, to check its bytes
        seen = _Downloads()
        again = fetch_model(uri, cache_dir=cache, sources=_options(registry), progress=seen)
        assert (again.path, seen.files) == (ok.path, [])
        for result in (ok, again):
            assert result.lease is not None
            result.lease.release()
    finally:
        httpx.delete(
            f"{registry.url}/api/2.0/mlflow/model-versions/delete",
            params={"name": "iris", "version": str(version)},
        )


def test_unknown_models_versions_and_aliases_are_not_found(
    registry: Registry, tmp_path: Path
) -> None:
    for uri, says in [
        ("models:/nosuch/1", "not found"),
        ("models:/iris/99", "not found"),
        ("models:/iris@nosuch", "alias nosuch not found"),
        ("runs:/00000000000000000000000000000000/model", "Run"),
        (f"runs:/{registry.run1}/nothing-here", "logged no model named 'nothing-here'"),
    ]:
        with pytest.raises(ModelNotFoundAtSource, match=says):
            fetch_model(uri, cache_dir=tmp_path, sources=_options(registry))
    code, _out, err = _fetch_cli(registry, tmp_path, "models:/iris@nosuch")
    assert code == 3, err


def test_runs_uri_finds_run_artefacts_and_mlflow3_logged_models(
    registry: Registry, tmp_path: Path
) -> None:
    onnx = fetch_model(
        f"runs:/{registry.onnx_run}/onnx-model", cache_dir=tmp_path, sources=_options(registry)
    )
    assert read_mlmodel(onnx.path).runtime == "onnx"
    logged = fetch_model(
        f"runs:/{registry.run2}/model", cache_dir=tmp_path, sources=_options(registry)
    )
    v2 = fetch_model("models:/iris/2", cache_dir=tmp_path, sources=_options(registry))
    assert _model_id(logged.path) == _model_id(v2.path)
    for result in (onnx, logged, v2):
        assert result.lease is not None
        result.lease.release()


def test_an_interrupted_download_resumes_from_the_bytes_kept(
    registry: Registry, tmp_path: Path
) -> None:
    full = fetch_model("models:/iris/1", cache_dir=tmp_path / "full", sources=_options(registry))
    data = (full.path / "model.skops").read_bytes()
    staging = StagingArea(tmp_path / "staging")
    staging.create()
    part = staging.partial("model.skops")
    with part.open(offset=0, validator=None) as f:
        f.write(data[:1000])  # what a killed fetch left

    started: dict[str, int] = {}

    class Record(NullProgress):
        def file_started(self, name: str, total_bytes: int | None, resumed_bytes: int) -> None:
            started[name] = resumed_bytes

    MlflowFetcher(_options(registry)).fetch(parse_model_uri("models:/iris/1"), staging, Record())
    assert started["model.skops"] == 1000
    assert (staging.files / "model.skops").read_bytes() == data


# -- MLmodel -> runtime ----------------------------------------------------------------


def test_an_unsupported_flavor_is_named_in_the_error(tmp_path: Path) -> None:
    (tmp_path / "MLmodel").write_text(
        "flavors:\n  python_function: {loader_module: mlflow.pytorch}\n"
        "  pytorch: {model_data: data, pytorch_version: 2.3.0}\n"
    )
    provisional = ModelConfig(name="m", runtime="auto", source_uri="models:/m/1")
    with pytest.raises(
        ModelLoadFailed,
        match=r"flavor\(s\) python_function, pytorch; podserve serves the sklearn and onnx",
    ):
        resolve_fetched(provisional, tmp_path)


def test_serve_loads_registry_and_run_uris_and_answers(registry: Registry, tmp_path: Path) -> None:
    registry.set_alias("champion", 2)
    rows = [[0.9, 0.1, 0.2, 0.3], [0.1, 0.9, 0.2, 0.3]]
    with ServerProcess(
        "--model", "champion=models:/iris@champion",
        "--model", "onnx=" + f"runs:/{registry.onnx_run}/onnx-model",
        "--mlflow-uri", registry.url,
        env={"PODSERVE_CACHE_DIR": str(tmp_path)},
    ) as server:  # fmt: skip
        wait_until(
            lambda: (
                server.get("/v2/models/onnx/ready").status_code == 200
                and server.get("/v2/models/champion/ready").status_code == 200
            ),
            timeout_s=60,
            what="both models ready",
        )
        with server.client() as client:
            meta = client.get("/v2/models/champion").json()
            assert meta["platform"] == "sklearn"
            body = {
                "inputs": [
                    {
                        "name": "features",
                        "shape": [2, 4],
                        "datatype": "FP64",
                        "data": [v for row in rows for v in row],
                    }
                ]
            }
            answer = client.post("/v2/models/champion/infer", json=body).json()
            # version 2 thresholds column 1: row 0 -> 0, row 1 -> 1
            assert answer["outputs"][0]["data"] == [0, 1]
            onnx_meta = client.get("/v2/models/onnx").json()
            assert onnx_meta["platform"] == "onnx"
            name = onnx_meta["inputs"][0]["name"]
            data = np.asarray(rows, dtype=np.float32).ravel().tolist()
            onnx_body = {
                "inputs": [{"name": name, "shape": [2, 4], "datatype": "FP32", "data": data}]
            }
            answer = client.post("/v2/models/onnx/infer", json=onnx_body).json()
            labels = next(o for o in answer["outputs"] if o["datatype"].startswith("INT"))
            # the ONNX model is version 1 (column 0): row 0 -> 1, row 1 -> 0
            assert labels["data"] == [1, 0]


def test_the_token_is_sent_as_a_bearer_and_a_refusal_says_so(tmp_path: Path) -> None:
    """A stand-in tracking server that refuses everyone (the real one runs without auth
    here) records what podserve sends."""
    import http.server
    import threading

    seen: list[str | None] = []

    class Refuse(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            body = b'{"error_code": "UNAUTHENTICATED", "message": "bad token"}'
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        options = SourceOptions(mlflow_tracking_uri=url, mlflow_token="s3cret")
        with pytest.raises(SourceAccessDenied, match="MLFLOW_TRACKING_TOKEN"):
            fetch_model("models:/iris@champion", cache_dir=tmp_path, sources=options)
        basic = SourceOptions(mlflow_tracking_uri=url.replace("//", "//user:pw@"))
        with pytest.raises(SourceAccessDenied):
            fetch_model("models:/iris/1", cache_dir=tmp_path, sources=basic)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert seen == ["Bearer s3cret", "Basic dXNlcjpwdw=="]
