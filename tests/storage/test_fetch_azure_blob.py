"""Azure Blob URIs against Azurite (Microsoft's Blob Storage emulator, npm `azurite`) on
127.0.0.1, through the real azure-storage-blob client. Azurite checks Shared Key and SAS
signatures and conditional headers like the service, so refusals, 404s and If-Match are
the emulator's own answers. Skipped, with the reason, only where `azurite-blob` is not
installed (.ci/run installs it).
"""

from __future__ import annotations

import datetime
import hashlib
import http.server
import json
import re
import shutil
import ssl
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
from podserve.storage.progress import NullProgress
from tests.storage.support import WAIT_S, expected_digest, serving, spawn_fetch
from tests.support.tls import self_signed

blob = pytest.importorskip("azure.storage.blob")

ACCOUNT = "devstoreaccount1"
# Azurite's well-known development account key (published in Azurite's README).
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
HOST = f"https://{ACCOUNT}.blob.core.windows.net"
FILES = {
    "config.json": b'{"layers": 2}',
    "weights/w.bin": hashlib.sha256(b"w").digest() * 40000,
    "empty.txt": b"",  # an empty file is part of the model, not a folder marker
}
_CREDENTIAL_VARS = (
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_AUTHORITY_HOST",
)


@dataclass
class _Azurite:
    proc: subprocess.Popen[str]
    endpoint: str
    drain: threading.Thread

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(WAIT_S)
        self.drain.join(WAIT_S)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def _start_azurite(*extra: str) -> _Azurite:
    binary = shutil.which("azurite-blob")
    if binary is None:
        pytest.skip("azurite-blob is not installed (npm install -g azurite@3; .ci/run does)")
    proc = subprocess.Popen(
        [
            binary,
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            "0",
            "--inMemoryPersistence",
            "--disableTelemetry",
            "--skipApiVersionCheck",
            "--silent",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:  # ends when Azurite exits; it prints its address once up
        seen.append(line)
        match = re.search(r"listens on (https?://\S+)", line)
        if match:
            # Keep reading so that a full pipe never stalls it.
            drain = threading.Thread(target=proc.stdout.read, daemon=True)
            drain.start()
            return _Azurite(proc, f"{match.group(1).rstrip('/')}/{ACCOUNT}", drain)
    proc.kill()
    proc.wait(WAIT_S)
    proc.stdout.close()
    raise AssertionError(f"azurite did not start: {''.join(seen)}")


@pytest.fixture(scope="module")
def azurite() -> Iterator[str]:
    server = _start_azurite()
    try:
        yield server.endpoint
    finally:
        server.stop()


def _connection_string(endpoint: str, key: str = KEY) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};"
        f"BlobEndpoint={endpoint};"
    )


@pytest.fixture
def container(azurite: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    for name in _CREDENTIAL_VARS:
        monkeypatch.delenv(name, raising=False)
    service = blob.BlobServiceClient.from_connection_string(_connection_string(azurite))
    made = service.create_container(f"m{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]}")
    for rel, data in FILES.items():
        made.upload_blob(f"llm/v1/{rel}", data)
    made.upload_blob("llm/v1/", b"")  # a "folder" marker some tools write
    # A hierarchical-namespace account lists its directories as blobs like this one.
    made.upload_blob("llm/v1/weights", b"", metadata={"hdi_isfolder": "true"})
    made.upload_blob("single/model.onnx", b"onnx")
    return made


def _fetch(
    uri: str, cache: Path, digest: str | None = None, sources: SourceOptions | None = None
) -> Path:
    result = fetch_model(uri, digest=digest, cache_dir=cache, sources=sources)
    if result.lease is not None:
        result.lease.release()
    return result.path


def _use_key(monkeypatch: pytest.MonkeyPatch, azurite: str, key: str = KEY) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", _connection_string(azurite, key))


def _files(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_prefix_with_a_connection_string(
    container: Any, azurite: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _use_key(monkeypatch, azurite)
    uri = f"{HOST}/{container.container_name}/llm/v1"
    path = _fetch(uri, tmp_path / "c", expected_digest(FILES))
    assert _files(path) == FILES


def test_one_blob_with_a_sas_token(
    container: Any, azurite: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sas = blob.generate_container_sas(
        ACCOUNT,
        container.container_name,
        account_key=KEY,
        permission=blob.ContainerSasPermissions(read=True, list=True),
        expiry=datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1),
    )
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", f"?{sas}")
    uri = f"{HOST}/{container.container_name}/single/model.onnx"
    sources = SourceOptions(azure_blob_endpoint=azurite)
    path = _fetch(uri, tmp_path / "c", expected_digest({"model.onnx": b"onnx"}), sources)
    assert _files(path) == {"model.onnx": b"onnx"}


def test_missing_blob_and_container_are_not_found(
    container: Any, azurite: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _use_key(monkeypatch, azurite)
    with pytest.raises(ModelNotFoundAtSource, match="no such blob"):
        _fetch(f"{HOST}/{container.container_name}/nothing/here", tmp_path / "c")
    with pytest.raises(ModelNotFoundAtSource, match="404 ContainerNotFound"):
        _fetch(f"{HOST}/no-such-container/x", tmp_path / "c")


def test_refusals_are_access_denied(
    container: Any, azurite: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    uri = f"{HOST}/{container.container_name}/llm/v1"
    sources = SourceOptions(azure_blob_endpoint=azurite)
    monkeypatch.setenv("AZURE_STORAGE_KEY", "AAAA" + KEY[4:])  # a wrong account key: 403
    with pytest.raises(SourceAccessDenied, match="403 AuthorizationFailure with the account key"):
        _fetch(uri, tmp_path / "c1", sources=sources)
    monkeypatch.delenv("AZURE_STORAGE_KEY")  # anonymous, on a private container: 403
    with pytest.raises(SourceAccessDenied, match="does not allow anonymous reads"):
        _fetch(uri, tmp_path / "c2", sources=sources)
    _use_key(monkeypatch, azurite)  # a connection string for another account
    other = f"https://otheraccount.blob.core.windows.net/{container.container_name}/llm/v1"
    with pytest.raises(SourceAccessDenied, match=r"'devstoreaccount1'.*'otheraccount'"):
        _fetch(other, tmp_path / "c3")


def test_wrong_digest_is_refused(
    container: Any, azurite: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _use_key(monkeypatch, azurite)
    with pytest.raises(DigestMismatch):
        _fetch(f"{HOST}/{container.container_name}/llm/v1", tmp_path / "c", "sha256:" + "0" * 64)


def _staging(uri: str, cache: Path, digest: str) -> StagingArea:
    staging = StagingArea(
        ModelCache(cache).prepare_staging(key_for(parse_model_uri(uri, digest=digest)))
    )
    staging.create()
    return staging


def test_resume_keeps_the_bytes_already_there(
    container: Any, azurite: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _use_key(monkeypatch, azurite)
    uri = f"{HOST}/{container.container_name}/llm/v1"
    etag = container.get_blob_client("llm/v1/weights/w.bin").get_blob_properties().etag
    cache, digest = tmp_path / "c", expected_digest(FILES)
    staging = _staging(uri, cache, digest)
    # Kept bytes that differ from the source: only a ranged read (a resume) keeps them.
    with staging.partial("weights/w.bin").open(offset=0, validator=etag) as f:
        f.write(b"\xff" * 1000)
    with pytest.raises(DigestMismatch):
        _fetch(uri, cache, digest)
    staging.create()
    with staging.partial("weights/w.bin").open(offset=0, validator=etag) as f:
        f.write(FILES["weights/w.bin"][:1000])
    assert _files(_fetch(uri, cache, digest)) == FILES


def test_a_blob_replaced_between_attempts_is_not_spliced(
    container: Any, azurite: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _use_key(monkeypatch, azurite)
    old, new = b"A" * 50_000, b"B" * 50_000
    client = container.get_blob_client("swap/m.bin")
    client.upload_blob(old)
    old_etag = client.get_blob_properties().etag
    uri, cache = f"{HOST}/{container.container_name}/swap/m.bin", tmp_path / "c"
    digest = expected_digest({"m.bin": new})
    staging = _staging(uri, cache, digest)
    with staging.partial("m.bin").open(offset=0, validator=old_etag) as f:
        f.write(old[:20_000])  # an attempt at the old version, cut off
    client.upload_blob(new, overwrite=True)
    # Resuming would give A*20000 + B*30000; the new ETag restarts it from byte 0.
    assert _files(_fetch(uri, cache, digest)) == {"m.bin": new}


class _ReplaceOnStart(NullProgress):
    """Replaces the blob after it was listed and before its bytes are read: the window in
    which only the If-Match precondition stands between the fetch and a splice."""

    def __init__(self, client: Any, data: bytes) -> None:
        self._client, self._data, self.replaced = client, data, False

    def file_started(self, name: str, total_bytes: int | None, resumed_bytes: int) -> None:
        if not self.replaced:
            self._client.upload_blob(self._data, overwrite=True)
            self.replaced = True


def test_a_blob_replaced_during_the_read_is_refused_then_refetched(
    container: Any, azurite: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _use_key(monkeypatch, azurite)
    client = container.get_blob_client("race/m.bin")
    client.upload_blob(b"A" * 50_000)
    uri, cache = f"{HOST}/{container.container_name}/race/m.bin", tmp_path / "c"
    progress = _ReplaceOnStart(client, b"B" * 50_000)
    with pytest.raises(FetchNetworkError, match=r"412 ConditionNotMet.*changed during"):
        fetch_model(uri, cache_dir=cache, progress=progress)
    assert progress.replaced
    assert _files(_fetch(uri, cache)) == {"m.bin": b"B" * 50_000}


def test_without_the_extra_the_error_names_it(
    container: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "azure.storage.blob", None)
    with pytest.raises(MissingExtra, match=r"podserve\[azure\]"):
        fetch_model(f"{HOST}/{container.container_name}/llm/v1", cache_dir=tmp_path / "c")


def test_podserve_fetch_cli_reads_azure_blob(container: Any, azurite: str, tmp_path: Path) -> None:
    cache = str(tmp_path / "c")
    uri = f"{HOST}/{container.container_name}/llm/v1"
    env = {"AZURE_STORAGE_CONNECTION_STRING": _connection_string(azurite)}
    child = spawn_fetch(uri, "--digest", expected_digest(FILES), "--cache-dir", cache, env=env)
    out, err = child.communicate(timeout=WAIT_S)
    assert child.returncode == 0, err
    assert _files(Path(out.strip())) == FILES

    env = {"AZURE_STORAGE_KEY": "AAAA" + KEY[4:], "PODSERVE_AZURE_BLOB_ENDPOINT": azurite}
    child = spawn_fetch(uri, "--cache-dir", str(tmp_path / "c2"), env=env)
    _, err = child.communicate(timeout=WAIT_S)
    assert child.returncode == 1, err  # EXIT_OTHER: access denied is not retried
    assert "AuthorizationFailure" in err


# -- AKS workload identity, end to end --------------------------------------------------
# What the webhook injects into a pod labelled azure.workload.identity/use: "true" whose
# ServiceAccount carries azure.workload.identity/client-id: AZURE_CLIENT_ID, AZURE_TENANT_ID,
# AZURE_FEDERATED_TOKEN_FILE and AZURE_AUTHORITY_HOST. The fetch trades the token file for an
# access token at the authority's token endpoint; Azurite, over TLS with `--oauth basic`,
# checks that token's audience, issuer and lifetime (not its signature). Microsoft Entra
# cannot run here: a local TLS server answers its token endpoint as Entra does
# (learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow, "Third
# case: Access token request with a federated credential").

TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
CLIENT_ID = "6c5a2f64-0d6c-4f2a-9b8e-1f7f3c2d9a10"


@dataclass
class _Entra:
    base: str
    requests: list[dict[str, str]]
    refuse: bool = False


def _tls_files(directory: Path) -> tuple[Path, Path]:
    """Trusted by the clients via REQUESTS_CA_BUNDLE (azure-core's transport is requests)."""
    return self_signed(directory)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def entra(tls: tuple[Path, Path]) -> Iterator[_Entra]:
    import jwt

    state = _Entra("", [])

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
            state.requests.append({"path": self.path, **form})
            answer: dict[str, object]
            if state.refuse:
                status, answer = (
                    401,
                    {
                        "error": "invalid_client",
                        "error_description": "AADSTS70021: No matching federated identity record "
                        "found for presented assertion.",
                    },
                )
            else:
                now = int(datetime.datetime.now(datetime.UTC).timestamp())
                claims = {
                    "aud": "https://storage.azure.com",
                    "iss": f"https://sts.windows.net/{TENANT}/",
                    "tid": TENANT,
                    "appid": CLIENT_ID,
                    "iat": now,
                    "nbf": now,
                    "exp": now + 3600,
                }
                token = jwt.encode(claims, "not-checked-by-azurite-" * 2, algorithm="HS256")
                status = 200
                answer = {"token_type": "Bearer", "expires_in": 3600, "access_token": token}
            body = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*tls)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    state.base = f"https://127.0.0.1:{server.server_address[1]}"
    with serving(server):
        yield state


@pytest.fixture(scope="module")
def azurite_oauth(tls: tuple[Path, Path]) -> Iterator[str]:
    cert, key = tls
    server = _start_azurite("--cert", str(cert), "--key", str(key), "--oauth", "basic")
    try:
        yield server.endpoint
    finally:
        server.stop()


@pytest.fixture
def workload_identity(
    azurite_oauth: str,
    entra: _Entra,
    tls: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> str:
    for name in _CREDENTIAL_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls[0]))
    service = blob.BlobServiceClient(
        azurite_oauth, credential={"account_name": ACCOUNT, "account_key": KEY}
    )
    made = service.create_container(f"w{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]}")
    for rel, data in FILES.items():
        made.upload_blob(f"llm/v1/{rel}", data)
    token_file = tmp_path / "azure-identity-token"
    token_file.write_text("projected-service-account-token")
    monkeypatch.setenv("AZURE_CLIENT_ID", CLIENT_ID)
    monkeypatch.setenv("AZURE_TENANT_ID", TENANT)
    monkeypatch.setenv("AZURE_FEDERATED_TOKEN_FILE", str(token_file))
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", entra.base)
    entra.requests.clear()
    entra.refuse = False
    return str(made.container_name)


def test_workload_identity_reads_what_the_webhook_injects(
    workload_identity: str, azurite_oauth: str, entra: _Entra, tmp_path: Path
) -> None:
    uri = f"{HOST}/{workload_identity}/llm/v1"
    sources = SourceOptions(azure_blob_endpoint=azurite_oauth)
    assert _files(_fetch(uri, tmp_path / "c", expected_digest(FILES), sources)) == FILES
    (request, *_) = entra.requests
    assert request["path"] == f"/{TENANT}/oauth2/v2.0/token"
    assert request["client_id"] == CLIENT_ID
    assert request["client_assertion"] == "projected-service-account-token"
    assert request["scope"] == "https://storage.azure.com/.default"


def test_workload_identity_refused_by_entra_is_access_denied(
    workload_identity: str, azurite_oauth: str, entra: _Entra, tmp_path: Path
) -> None:
    entra.refuse = True
    uri = f"{HOST}/{workload_identity}/llm/v1"
    with pytest.raises(SourceAccessDenied, match=r"workload identity.*AADSTS70021"):
        _fetch(uri, tmp_path / "c", sources=SourceOptions(azure_blob_endpoint=azurite_oauth))
    # Asked once, up front: not again by each of the storage client's retries.
    assert len(entra.requests) == 1
