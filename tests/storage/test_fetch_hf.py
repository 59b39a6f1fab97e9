"""hf:// against an offline Hugging Face cache built here (never the network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from podserve.storage import ModelNotFoundAtSource, SourceOptions, fetch_model
from tests.storage.support import expected_digest

pytest.importorskip("huggingface_hub")

COMMIT = "0123456789abcdef0123456789abcdef01234567"
FILES = {"config.json": b'{"hidden": 8}', "model.safetensors": b"\x08" * 4096}


def _offline_hub(root: Path) -> Path:
    """The layout huggingface_hub keeps: blobs, a snapshot of links, and refs."""
    repo = root / "models--acme--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for rel, data in FILES.items():
        blob = repo / "blobs" / rel.replace(".", "_")
        blob.write_bytes(data)
        (snapshot / rel).symlink_to(blob)
    return root


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SourceOptions:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # belt and braces: no request may leave
    return SourceOptions(hf_cache_dir=_offline_hub(tmp_path / "hub"), hf_offline=True)


@pytest.mark.parametrize("revision", ["@main", f"@{COMMIT}", ""])
def test_revision_resolves_to_real_files(hub: SourceOptions, tmp_path: Path, revision: str) -> None:
    result = fetch_model(
        f"hf://acme/tiny{revision}",
        digest=expected_digest(FILES),
        cache_dir=tmp_path / "c",
        sources=hub,
    )
    assert result.lease is not None
    result.lease.release()
    for rel, data in FILES.items():
        assert not (result.path / rel).is_symlink()  # no links into a cache that may go
        assert (result.path / rel).read_bytes() == data


def test_missing_repo_or_revision_is_not_found(hub: SourceOptions, tmp_path: Path) -> None:
    for uri in ("hf://acme/other", "hf://acme/tiny@v9"):
        with pytest.raises(ModelNotFoundAtSource, match="offline"):
            fetch_model(uri, cache_dir=tmp_path / "c", sources=hub)
