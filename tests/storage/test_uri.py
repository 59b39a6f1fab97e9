from __future__ import annotations

import os

import pytest

from podserve.storage import Digest, InvalidModelURI, Scheme, parse_model_uri

HEX = "ab" * 32
OTHER = "cd" * 32


def test_local_paths_become_absolute_file_uris(tmp_path: os.PathLike[str]) -> None:
    uri = parse_model_uri("./models/m")
    assert uri.scheme is Scheme.FILE
    assert uri.location == os.path.abspath("models/m")
    assert parse_model_uri("file:///srv/m").location == "/srv/m"
    assert parse_model_uri("file://localhost/srv/a%20b").location == "/srv/a b"
    assert parse_model_uri("/srv/m").normalized() == "file:///srv/m"


def test_file_uri_with_a_remote_host_is_refused() -> None:
    with pytest.raises(InvalidModelURI, match="local path"):
        parse_model_uri("file://server/srv/m")


def test_pin_is_split_off_any_scheme() -> None:
    uri = parse_model_uri(f"s3://bucket/models/m@sha256:{HEX.upper()}")
    assert (uri.scheme, uri.bucket, uri.key) == (Scheme.S3, "bucket", "models/m")
    assert uri.pinned == Digest(HEX)
    assert str(uri) == f"s3://bucket/models/m@sha256:{HEX}"
    http = parse_model_uri(f"https://user:pw@host/m.onnx@sha256:{HEX}")
    assert http.location == "https://user:pw@host/m.onnx"
    assert http.pinned == Digest(HEX)


def test_hf_revision_and_pin() -> None:
    uri = parse_model_uri(f"hf://acme/tiny@v1.0@sha256:{HEX}")
    assert (uri.scheme, uri.location, uri.revision) == (Scheme.HF, "acme/tiny", "v1.0")
    assert uri.pinned == Digest(HEX)
    assert parse_model_uri("hf://acme/tiny").revision is None
    assert parse_model_uri("hf://acme/tiny@main").normalized() == "hf://acme/tiny@main"


@pytest.mark.parametrize(
    "bad", ["hf://", "hf://a/b/c", "hf://acme/tiny@x@y", "s3://", "http:///x", "ftp://host/m", ""]
)
def test_malformed_uris_are_refused(bad: str) -> None:
    with pytest.raises(InvalidModelURI):
        parse_model_uri(bad)


def test_separate_digest_pins_and_must_agree_with_the_uri() -> None:
    assert parse_model_uri("s3://b/k", digest=f"sha256:{HEX}").pinned == Digest(HEX)
    assert parse_model_uri(f"s3://b/k@sha256:{HEX}", digest=f"sha256:{HEX}").pinned == Digest(HEX)
    with pytest.raises(InvalidModelURI, match="pins"):
        parse_model_uri(f"s3://b/k@sha256:{HEX}", digest=f"sha256:{OTHER}")


@pytest.mark.parametrize("bad", ["md5:abc", HEX, "sha256:xyz", f"sha256:{HEX}0"])
def test_malformed_digests_are_refused(bad: str) -> None:
    with pytest.raises(InvalidModelURI, match="digest"):
        Digest.parse(bad)


def test_source_id_depends_on_revision_not_on_pin() -> None:
    a = parse_model_uri("hf://acme/tiny@v1")
    b = parse_model_uri("hf://acme/tiny@v2")
    pinned = parse_model_uri(f"hf://acme/tiny@v1@sha256:{HEX}")
    assert a.source_id() != b.source_id()
    assert a.source_id() == pinned.source_id()
