"""A digest pin on a moving name, without a registry: the fetch pipeline's own rules.

`Registry` stands in for MLflow's tracking server (an alias → version table and each
version's files on disk) so that these run in milliseconds; the same behaviour against a
real `mlflow server` is in test_mlflow.py.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest

from podserve.storage import DigestMismatch, Scheme, fetch_model
from podserve.storage.digest import compute_manifest
from podserve.storage.fetchers.base import StagingArea
from podserve.storage.progress import Progress
from podserve.storage.uri import ModelURI


@dataclass
class Registry:
    root: Path
    aliases: dict[str, int] = field(default_factory=dict)
    downloads: list[str] = field(default_factory=list)

    def version(self, number: int, content: bytes) -> None:
        folder = self.root / f"v{number}"
        folder.mkdir(parents=True)
        (folder / "model.bin").write_bytes(content)

    def resolve(self, uri: ModelURI) -> ModelURI:
        name, _, alias = uri.location.partition("@")
        if not alias:
            return ModelURI(uri.scheme, uri.location, revision="registry", pinned=uri.pinned)
        location = f"{name}/{self.aliases[alias]}"
        return ModelURI(uri.scheme, location, revision="registry", pinned=uri.pinned)

    def fetch(self, uri: ModelURI, staging: StagingArea, progress: Progress) -> None:
        self.downloads.append(uri.location)
        number = uri.location.rsplit("/", 1)[1]
        shutil.copytree(self.root / f"v{number}", staging.files, dirs_exist_ok=True)


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    registry = Registry(tmp_path / "registry")
    registry.version(1, b"version one")
    registry.version(2, b"version two")
    registry.version(3, b"version one")  # other version, same bytes as 1
    return registry


def _fetch(registry: Registry, uri: str, cache: Path) -> Path:
    result = fetch_model(uri, cache_dir=cache, fetchers={Scheme.MODELS: registry})
    assert result.lease is not None
    result.lease.release()
    return result.path


def test_a_warm_pin_refuses_a_moved_alias_and_names_both_versions(
    registry: Registry, tmp_path: Path
) -> None:
    pin = compute_manifest(registry.root / "v1").digest
    other = compute_manifest(registry.root / "v2").digest
    cache = tmp_path / "cache"
    registry.aliases["prod"] = 1
    warm = _fetch(registry, f"models:/m@prod@{pin}", cache)
    assert registry.downloads == ["m/1"]
    assert _fetch(registry, f"models:/m@prod@{pin}", cache) == warm
    assert registry.downloads == ["m/1"]  # unmoved: no download

    registry.aliases["prod"] = 2
    with pytest.raises(DigestMismatch) as refused:
        _fetch(registry, f"models:/m@prod@{pin}", cache)
    message = refused.value.message
    assert "models:/m@prod (which now names models:/m/2 on registry" in message
    assert "the cached copy of the pinned digest came from models:/m/1 on registry" in message
    assert (refused.value.expected, refused.value.actual) == (str(pin), str(other))
    assert warm.is_dir()  # the pinned bytes stay cached for whoever names them rightly

    # Moved to a version with the same bytes: checked once, recorded, then a plain hit.
    registry.aliases["prod"] = 3
    assert _fetch(registry, f"models:/m@prod@{pin}", cache) == warm
    assert _fetch(registry, f"models:/m@prod@{pin}", cache) == warm
    assert registry.downloads == ["m/1", "m/2", "m/3"]
    manifest = orjson.loads(warm.with_name(f"{warm.name}.manifest.json").read_bytes())
    assert manifest["source"] == "models:/m/1 on registry"
    assert manifest["verified_sources"] == ["models:/m/3 on registry"]


def test_a_cold_pin_on_a_moved_alias_names_the_alias(registry: Registry, tmp_path: Path) -> None:
    pin = compute_manifest(registry.root / "v1").digest
    registry.aliases["prod"] = 2
    with pytest.raises(DigestMismatch, match=r"models:/m@prod \(which now names models:/m/2"):
        _fetch(registry, f"models:/m@prod@{pin}", tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("entries/*"))


def test_a_pinned_version_number_is_a_plain_hit(registry: Registry, tmp_path: Path) -> None:
    """A version never moves: a warm pinned version is served without asking again."""
    pin = compute_manifest(registry.root / "v2").digest
    first = _fetch(registry, f"models:/m/2@{pin}", tmp_path / "cache")
    assert _fetch(registry, f"models:/m/2@{pin}", tmp_path / "cache") == first
    assert registry.downloads == ["m/2"]
