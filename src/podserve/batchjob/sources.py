"""Where a batch job's model and input come from: a local path, or any URI the storage
layer fetches (file://, http(s)://, s3://, hf://), verified and cached like a served model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from podserve.config.model_config import MODEL_CONFIG_FILENAME, ModelConfig, load_model_config
from podserve.core.errors import InvalidInput
from podserve.repository.discovery import with_versions
from podserve.repository.loading import load_and_warm
from podserve.runtimes import ModelAPI
from podserve.storage import ensure_local


@dataclass(frozen=True, slots=True)
class LoadedModel:
    config: ModelConfig
    model: ModelAPI


def load_model(directory: Path) -> LoadedModel:
    """Create and load the model in `directory` (which holds its model.yaml) as the server
    does: the runtime model.yaml names, its declared inputs and outputs, its parameters."""
    if not (directory / MODEL_CONFIG_FILENAME).is_file():
        raise InvalidInput(
            f"{directory} has no {MODEL_CONFIG_FILENAME}; podserve batch needs a model "
            "directory (see docs/model-config.md)"
        )
    # The server's own steps: the latest version directory, the digest pin, the warm-up.
    config = with_versions(load_model_config(directory))[-1]
    model = load_and_warm(config)
    if not isinstance(model, ModelAPI):
        model.close()
        raise InvalidInput(f"podserve batch scores tensor models; {config.name!r} generates text")
    return LoadedModel(config=config, model=model)


def fetch_model_dir(uri: str, *, digest: str | None, cache_dir: Path) -> Path:
    """The verified local copy of a model URI (a directory, or a local file in place)."""
    return ensure_local(uri, digest=digest, cache_dir=cache_dir)


def local_input(location: str, *, cache_dir: Path) -> Path:
    """The local JSONL file for `location`: a path as is, a URI fetched through the cache.
    A fetched single file arrives as a directory holding that one file."""
    path = ensure_local(location, digest=None, cache_dir=cache_dir)
    if path.is_file():
        return path
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    if len(files) != 1:
        raise InvalidInput(
            f"input {location!r} is a directory of {len(files)} files; give one JSONL file"
        )
    return files[0]
