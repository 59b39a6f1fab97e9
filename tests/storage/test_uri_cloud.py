"""gs:// and Azure Blob URIs: what parses, to what, and what is refused with which reason."""

from __future__ import annotations

import pytest

from podserve.storage import InvalidModelURI, Scheme, parse_model_uri

PIN = "sha256:" + "ab" * 32


BLOB = "acct1.blob.core.windows.net"


@pytest.mark.parametrize(
    ("text", "location"),
    [
        # The forms KServe's storage initializer accepts (_AZURE_BLOB_RE).
        (f"https://{BLOB}/models/llm/v1", f"{BLOB}/models/llm/v1"),
        (f"https://{BLOB}/models/llm/v1/", f"{BLOB}/models/llm/v1"),
        ("https://acct1.z12.blob.storage.azure.net/c/m", "acct1.z12.blob.storage.azure.net/c/m"),
        (f"https://{BLOB}/models", f"{BLOB}/models"),
    ],
)
def test_azure_blob_urls_go_to_the_azure_fetcher(text: str, location: str) -> None:
    uri = parse_model_uri(f"{text}@{PIN}")
    assert uri.scheme is Scheme.AZURE_BLOB
    assert uri.location == location
    assert uri.normalized() == f"https://{location}"
    assert str(uri.pinned) == PIN


def test_other_https_urls_stay_plain_files() -> None:
    assert parse_model_uri("https://example.com/m.onnx").scheme is Scheme.HTTPS
    # KServe's patterns are https only; plain http to the same host is an ordinary download.
    assert parse_model_uri("http://acct1.blob.core.windows.net/c/m").scheme is Scheme.HTTP


def test_gs_uris_name_a_bucket_and_key() -> None:
    uri = parse_model_uri("gs://models/llm/v1/")
    assert (uri.scheme, uri.bucket, uri.key) == (Scheme.GS, "models", "llm/v1")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("https://acct1.blob.core.windows.net/c/m?sv=2022&sig=secret", "AZURE_STORAGE_SAS_TOKEN"),
        ("https://ab.blob.core.windows.net/c/m", "3-24 lowercase letters and digits"),
        ("https://acct1.blob.core.windows.net/", "names no container"),
        ("https://acct1.blob.core.windows.net:8443/c/m", "expected https://<account>"),
        ("azure-blob://acct1/c/m", "unsupported URI scheme azure-blob://"),
        ("gs:///path", "names no bucket"),
    ],
)
def test_refused_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(InvalidModelURI, match=reason.replace("?", r"\?")) as caught:
        parse_model_uri(text)
    assert "secret" not in str(caught.value)  # a SAS never reaches a log line
