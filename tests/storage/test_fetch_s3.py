"""s3:// against a real S3-compatible server on 127.0.0.1: moto in server mode (no store
that installs from the package registries runs as a plain process here)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podserve.storage import (
    DigestMismatch,
    FetchNetworkError,
    ModelNotFoundAtSource,
    SourceOptions,
    fetch_model,
    parse_model_uri,
)
from podserve.storage.cache import ModelCache, key_for
from podserve.storage.fetchers import StagingArea
from tests.storage.support import expected_digest

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")

FILES = {"config.json": b'{"layers": 2}', "weights/w.bin": hashlib.sha256(b"w").digest() * 40000}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    # Credentials the fake accepts, and no profile or instance metadata from this machine.
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }.items():
        monkeypatch.setenv(name, value)
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    bucket = f"models-{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]}"
    client.create_bucket(Bucket=bucket)
    for rel, data in FILES.items():
        client.put_object(Bucket=bucket, Key=f"llm/v1/{rel}", Body=data)
    client.put_object(Bucket=bucket, Key="llm/v1/", Body=b"")  # a "folder" marker
    client.put_object(Bucket=bucket, Key="single/model.onnx", Body=b"onnx")
    return client, bucket


def _fetch(s3_endpoint: str, uri: str, cache: Path, digest: str | None = None) -> Path:
    result = fetch_model(
        uri, digest=digest, cache_dir=cache, sources=SourceOptions(s3_endpoint_url=s3_endpoint)
    )
    if result.lease is not None:
        result.lease.release()
    return result.path


def test_prefix_is_fetched_as_a_directory(s3: Any, s3_endpoint: str, tmp_path: Path) -> None:
    _, bucket = s3
    path = _fetch(s3_endpoint, f"s3://{bucket}/llm/v1", tmp_path / "c", expected_digest(FILES))
    assert {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()} == set(FILES)
    assert (path / "weights" / "w.bin").read_bytes() == FILES["weights/w.bin"]


def test_single_object_is_a_model_of_one_file(s3: Any, s3_endpoint: str, tmp_path: Path) -> None:
    _, bucket = s3
    path = _fetch(
        s3_endpoint,
        f"s3://{bucket}/single/model.onnx",
        tmp_path / "c",
        expected_digest({"model.onnx": b"onnx"}),
    )
    assert (path / "model.onnx").read_bytes() == b"onnx"


def test_missing_key_and_bucket_are_not_found(s3: Any, s3_endpoint: str, tmp_path: Path) -> None:
    _, bucket = s3
    with pytest.raises(ModelNotFoundAtSource):
        _fetch(s3_endpoint, f"s3://{bucket}/nothing/here", tmp_path / "c")
    with pytest.raises(ModelNotFoundAtSource):
        _fetch(s3_endpoint, "s3://no-such-bucket-podserve/x", tmp_path / "c")


def test_wrong_digest_is_refused(s3: Any, s3_endpoint: str, tmp_path: Path) -> None:
    _, bucket = s3
    with pytest.raises(DigestMismatch):
        _fetch(s3_endpoint, f"s3://{bucket}/llm/v1", tmp_path / "c", "sha256:" + "0" * 64)


def test_resume_keeps_the_bytes_already_there(s3: Any, s3_endpoint: str, tmp_path: Path) -> None:
    client, bucket = s3
    uri = f"s3://{bucket}/llm/v1"
    etag = client.head_object(Bucket=bucket, Key="llm/v1/weights/w.bin")["ETag"]
    cache = tmp_path / "c"
    staging = StagingArea(
        ModelCache(cache).prepare_staging(
            key_for(parse_model_uri(uri, digest=expected_digest(FILES)))
        )
    )
    staging.create()
    # Kept bytes that differ from the source: only a ranged GET (resume) keeps them, so
    # the digest then fails. A fetcher that ignored the partial would succeed here.
    with staging.partial("weights/w.bin").open(offset=0, validator=etag) as f:
        f.write(b"\xff" * 1000)
    with pytest.raises(DigestMismatch):
        _fetch(s3_endpoint, uri, cache, expected_digest(FILES))
    # The mismatch discarded the staging; the same resume with the right bytes succeeds.
    staging.create()
    with staging.partial("weights/w.bin").open(offset=0, validator=etag) as f:
        f.write(FILES["weights/w.bin"][:1000])
    path = _fetch(s3_endpoint, uri, cache, expected_digest(FILES))
    assert (path / "weights" / "w.bin").read_bytes() == FILES["weights/w.bin"]


def test_unreachable_endpoint_is_a_network_error(s3: Any, tmp_path: Path) -> None:
    _, bucket = s3
    with pytest.raises(FetchNetworkError):
        fetch_model(
            f"s3://{bucket}/llm/v1",
            cache_dir=tmp_path / "c",
            sources=SourceOptions(s3_endpoint_url="http://127.0.0.1:9", timeout_s=2),
        )
