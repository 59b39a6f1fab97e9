"""gs:// against a real Cloud Storage emulator on 127.0.0.1 (gcp-storage-emulator, the JSON
API in one process), through the real google-cloud-storage client.

The emulator checks no credentials, so the 401/403 tests talk to a stand-in HTTP server that
answers as Cloud Storage does when it refuses a caller (the JSON API's error body,
https://cloud.google.com/storage/docs/json_api/v1/status-codes); the client library still
does the whole request and error parsing.
"""

from __future__ import annotations

import hashlib
import http.server
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from podserve.storage import (
    DigestMismatch,
    FetchNetworkError,
    MissingExtra,
    ModelNotFoundAtSource,
    SourceAccessDenied,
    SourceOptions,
    fetch_model,
    parse_model_uri,
)
from podserve.storage.cache import ModelCache, key_for
from podserve.storage.fetchers import StagingArea
from tests.storage.support import WAIT_S, expected_digest, serving, spawn_fetch

gcs = pytest.importorskip("google.cloud.storage")
emulator = pytest.importorskip("gcp_storage_emulator.server")

FILES = {"config.json": b'{"layers": 2}', "weights/w.bin": hashlib.sha256(b"w").digest() * 40000}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = emulator.create_server("127.0.0.1", 0, in_memory=True)
    server.start()
    # The emulator binds in its own thread; start() returns once it listens.
    port = server._api._httpd.server_address[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def bucket(endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    from google.auth.credentials import AnonymousCredentials

    client = gcs.Client(
        project="test",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": endpoint},
    )
    name = f"models-{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]}"
    made = client.create_bucket(name)
    for rel, data in FILES.items():
        made.blob(f"llm/v1/{rel}").upload_from_string(data)
    made.blob("llm/v1/").upload_from_string(b"")  # a console "folder" placeholder
    made.blob("single/model.onnx").upload_from_string(b"onnx")
    return made


def _sources(endpoint: str, **kwargs: Any) -> SourceOptions:
    return SourceOptions(gcs_endpoint_url=endpoint, gcs_anonymous=True, **kwargs)


def _fetch(endpoint: str, uri: str, cache: Path, digest: str | None = None) -> Path:
    result = fetch_model(uri, digest=digest, cache_dir=cache, sources=_sources(endpoint))
    if result.lease is not None:
        result.lease.release()
    return result.path


def _staging(uri: str, cache: Path, digest: str) -> StagingArea:
    key = key_for(parse_model_uri(uri, digest=digest))
    staging = StagingArea(ModelCache(cache).prepare_staging(key))
    staging.create()
    return staging


def test_prefix_is_fetched_as_a_directory(bucket: Any, endpoint: str, tmp_path: Path) -> None:
    path = _fetch(endpoint, f"gs://{bucket.name}/llm/v1", tmp_path / "c", expected_digest(FILES))
    assert {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()} == set(FILES)
    assert (path / "weights" / "w.bin").read_bytes() == FILES["weights/w.bin"]


def test_single_object_is_a_model_of_one_file(bucket: Any, endpoint: str, tmp_path: Path) -> None:
    uri = f"gs://{bucket.name}/single/model.onnx"
    path = _fetch(endpoint, uri, tmp_path / "c", expected_digest({"model.onnx": b"onnx"}))
    assert (path / "model.onnx").read_bytes() == b"onnx"


def test_missing_object_and_bucket_are_not_found(
    bucket: Any, endpoint: str, tmp_path: Path
) -> None:
    with pytest.raises(ModelNotFoundAtSource, match="no such object"):
        _fetch(endpoint, f"gs://{bucket.name}/nothing/here", tmp_path / "c")
    with pytest.raises(ModelNotFoundAtSource, match="404"):
        _fetch(endpoint, "gs://no-such-bucket-podserve/x", tmp_path / "c")


def test_wrong_digest_is_refused(bucket: Any, endpoint: str, tmp_path: Path) -> None:
    with pytest.raises(DigestMismatch):
        _fetch(endpoint, f"gs://{bucket.name}/llm/v1", tmp_path / "c", "sha256:" + "0" * 64)


def test_resume_keeps_the_bytes_already_there(bucket: Any, endpoint: str, tmp_path: Path) -> None:
    uri = f"gs://{bucket.name}/llm/v1"
    generation = str(bucket.get_blob("llm/v1/weights/w.bin").generation)
    cache, digest = tmp_path / "c", expected_digest(FILES)
    staging = _staging(uri, cache, digest)
    # Kept bytes that differ from the source: only a ranged read (a resume) keeps them, so
    # the digest then fails. A fetcher that ignored the partial would succeed here.
    with staging.partial("weights/w.bin").open(offset=0, validator=generation) as f:
        f.write(b"\xff" * 1000)
    with pytest.raises(DigestMismatch):
        _fetch(endpoint, uri, cache, digest)
    # The mismatch discarded the staging; the same resume with the right bytes succeeds.
    staging.create()
    with staging.partial("weights/w.bin").open(offset=0, validator=generation) as f:
        f.write(FILES["weights/w.bin"][:1000])
    path = _fetch(endpoint, uri, cache, digest)
    assert (path / "weights" / "w.bin").read_bytes() == FILES["weights/w.bin"]


def test_an_object_replaced_between_attempts_is_not_spliced(
    bucket: Any, endpoint: str, tmp_path: Path
) -> None:
    old, new = b"A" * 50_000, b"B" * 50_000
    blob = bucket.blob("swap/m.bin")
    blob.upload_from_string(old)
    old_generation = str(bucket.get_blob("swap/m.bin").generation)
    uri, cache = f"gs://{bucket.name}/swap/m.bin", tmp_path / "c"
    digest = expected_digest({"m.bin": new})
    staging = _staging(uri, cache, digest)
    with staging.partial("m.bin").open(offset=0, validator=old_generation) as f:
        f.write(old[:20_000])  # an attempt at the old version, cut off
    blob.upload_from_string(new)
    assert str(bucket.get_blob("swap/m.bin").generation) != old_generation
    # Resuming would give A*20000 + B*30000; the new generation restarts it from byte 0.
    path = _fetch(endpoint, uri, cache, digest)
    assert (path / "m.bin").read_bytes() == new


def test_no_credentials_is_access_denied(
    bucket: Any, endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The default chain's first source names a file that is not there: google.auth stops
    # there, before any network (google/auth/_default.py, _get_explicit_environ_credentials).
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(SourceAccessDenied, match="no Google credentials"):
        fetch_model(
            f"gs://{bucket.name}/llm/v1",
            cache_dir=tmp_path / "c",
            sources=SourceOptions(gcs_endpoint_url=endpoint),
        )


class _Refusing(http.server.BaseHTTPRequestHandler):
    """Answers every request as Cloud Storage refuses a caller."""

    status = 403

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        reason = "Forbidden" if self.status == 403 else "Unauthorized"
        body = orjson.dumps(
            {
                "error": {
                    "code": self.status,
                    "message": "fetch@p.iam.gserviceaccount.com does not have "
                    "storage.objects.get access to the Google Cloud Storage object.",
                    "errors": [{"reason": reason.lower(), "domain": "global"}],
                }
            }
        )
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize(
    ("status", "says"),
    [(401, "refuses anonymous reads"), (403, "403.*objects.get access.*objectViewer")],
)
def test_refusals_are_access_denied(status: int, says: str, tmp_path: Path) -> None:
    handler = type("Handler", (_Refusing,), {"status": status})
    with (
        serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)) as server,
        pytest.raises(SourceAccessDenied, match=says),
    ):
        fetch_model(
            "gs://private/llm/v1",
            cache_dir=tmp_path / "c",
            sources=_sources(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=5),
        )


class _Replaced(http.server.BaseHTTPRequestHandler):
    """Cloud Storage with an object that is replaced right after it was listed: the
    metadata names generation 1, and a read conditioned on generation 1 is refused with 412
    (cloud.google.com/storage/docs/request-preconditions). The emulator ignores
    ifGenerationMatch, so this stand-in shows what the fetch sends and does with the 412."""

    reads: list[str] = []

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        answer: dict[str, object]
        if path.startswith("/download/"):
            self.reads.append(query)
            status, answer = 412, {"error": {"code": 412, "message": "Precondition Failed"}}
        else:
            status = 200
            answer = {
                "kind": "storage#object",
                "bucket": "b",
                "name": "m.bin",
                "size": "10",
                "generation": "1",
            }
        body = orjson.dumps(answer)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_read_is_conditioned_on_the_listed_generation(tmp_path: Path) -> None:
    with (
        serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Replaced)) as server,
        pytest.raises(FetchNetworkError, match=r"412.*changed during the download"),
    ):
        fetch_model(
            "gs://b/m.bin",
            cache_dir=tmp_path / "c",
            sources=_sources(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=5),
        )
    assert _Replaced.reads
    assert "ifGenerationMatch=1" in _Replaced.reads[0].split("&")


def test_unreachable_endpoint_is_a_network_error(tmp_path: Path) -> None:
    with pytest.raises(FetchNetworkError):
        fetch_model(
            "gs://bucket/llm/v1",
            cache_dir=tmp_path / "c",
            sources=_sources("http://127.0.0.1:9", timeout_s=1),
        )


def test_without_the_extra_the_error_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "google.cloud.storage", None)
    with pytest.raises(MissingExtra, match=r"podserve\[gcs\]"):
        fetch_model("gs://bucket/m", cache_dir=tmp_path / "c", sources=SourceOptions())


def test_podserve_fetch_cli_reads_gs(bucket: Any, endpoint: str, tmp_path: Path) -> None:
    # The endpoint as a pod would set it for an emulator: the library's own variable.
    env = {"STORAGE_EMULATOR_HOST": endpoint}
    cache = str(tmp_path / "c")
    uri = f"gs://{bucket.name}/llm/v1"
    child = spawn_fetch(uri, "--digest", expected_digest(FILES), "--cache-dir", cache, env=env)
    out, err = child.communicate(timeout=WAIT_S)
    assert child.returncode == 0, err
    path = Path(out.strip())
    assert (path / "weights" / "w.bin").read_bytes() == FILES["weights/w.bin"]
    assert '"event":"published"' in err.replace(" ", "")

    child = spawn_fetch(f"gs://{bucket.name}/absent", "--cache-dir", cache, env=env)
    _, err = child.communicate(timeout=WAIT_S)
    assert child.returncode == 3, err  # EXIT_NOT_FOUND


# -- GKE Workload Identity, through the metadata server -----------------------------------
# On GKE with Workload Identity, the pod's metadata server (gke-metadata-server) answers the
# GCE metadata API with tokens for the Google service account that the ServiceAccount's
# `iam.gke.io/gcp-service-account` names. GKE cannot run here: a local server answers that API
# as the metadata server does (cloud.google.com/compute/docs/metadata/querying-metadata: the
# `Metadata-Flavor: Google` request header is required, and answered). google-auth finds it
# through GCE_METADATA_HOST / GCE_METADATA_IP (google/auth/environment_vars.py), read when it
# is imported, so `podserve fetch` runs in a child process.

TOKEN = "ya29.workload-identity-token"


@dataclass
class _Metadata:
    base: str
    paths: list[str] = field(default_factory=list)


@pytest.fixture
def metadata_server() -> Iterator[_Metadata]:
    state = _Metadata("")

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            answers: dict[str, object] = {
                "/": "",
                "/computeMetadata/v1/instance/service-accounts/default/": {
                    "email": "fetch@proj.iam.gserviceaccount.com",
                    "aliases": ["default"],
                    "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
                },
                "/computeMetadata/v1/instance/service-accounts/default/token": {
                    "access_token": TOKEN,
                    "expires_in": 3599,
                    "token_type": "Bearer",
                },
                "/computeMetadata/v1/universe/universe-domain": "googleapis.com",
            }
            answer = answers.get(path)
            if self.headers.get("Metadata-Flavor") != "Google":
                status, body = 403, b"Missing Metadata-Flavor:Google header."
            elif answer is None:
                status, body = 404, b"not found"
            else:
                state.paths.append(path)
                status = 200
                body = answer.encode() if isinstance(answer, str) else orjson.dumps(answer)
            self.send_response(status)
            self.send_header("Metadata-Flavor", "Google")
            # JSON for a directory listing or a token, text for a single value.
            json_answer = status == 200 and isinstance(answer, dict)
            self.send_header("Content-Type", "application/json" if json_answer else "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as server:
        state.base = f"127.0.0.1:{server.server_address[1]}"
        yield state


def _metadata_env(metadata: _Metadata, tmp_path: Path) -> dict[str, str]:
    return {
        "GCE_METADATA_HOST": metadata.base,
        "GCE_METADATA_IP": metadata.base,
        "CLOUDSDK_CONFIG": str(tmp_path / "no-gcloud"),  # no application-default file
        "GOOGLE_APPLICATION_CREDENTIALS": "",
        "STORAGE_EMULATOR_HOST": "",
    }


def test_workload_identity_token_comes_from_the_metadata_server(
    bucket: Any, endpoint: str, metadata_server: _Metadata, tmp_path: Path
) -> None:
    uri = f"gs://{bucket.name}/llm/v1"
    child = spawn_fetch(
        uri,
        "--digest",
        expected_digest(FILES),
        "--gcs-endpoint-url",
        endpoint,
        "--cache-dir",
        str(tmp_path / "c"),
        env=_metadata_env(metadata_server, tmp_path),
    )
    out, err = child.communicate(timeout=WAIT_S)
    assert child.returncode == 0, err
    assert (Path(out.strip()) / "weights" / "w.bin").read_bytes() == FILES["weights/w.bin"]
    assert "/computeMetadata/v1/instance/service-accounts/default/token" in metadata_server.paths


def test_workload_identity_token_is_sent_and_a_refusal_named(
    metadata_server: _Metadata, tmp_path: Path
) -> None:
    seen: list[str] = []

    class Recording(_Refusing):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization", ""))
            super().do_GET()

    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recording)) as server:
        child = spawn_fetch(
            "gs://private/llm/v1",
            "--gcs-endpoint-url",
            f"http://127.0.0.1:{server.server_address[1]}",
            "--cache-dir",
            str(tmp_path / "c"),
            env=_metadata_env(metadata_server, tmp_path),
        )
        _, err = child.communicate(timeout=WAIT_S)
    assert child.returncode == 1, err  # access denied
    assert "objectViewer" in err
    assert seen
    assert seen[0] == f"Bearer {TOKEN}"
