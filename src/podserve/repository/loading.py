"""Blocking load steps, run on a worker thread: fetch a model named by URI into the node
cache, verify a pinned digest, instantiate the runtime, load it, and warm it up."""

from __future__ import annotations

from pathlib import Path

from podserve.config.model_config import ModelConfig
from podserve.core.errors import ModelLoadFailed
from podserve.generation.client import EngineClient
from podserve.generation.registry import (
    EngineServices,
    is_generative,
    load_engine,
    standalone_services,
)
from podserve.repository.discovery import resolve_fetched
from podserve.runtimes import LoadContext, ModelAPI, create_model
from podserve.runtimes.parameters import validate_parameters
from podserve.storage import (
    Digest,
    DigestMismatch,
    StorageError,
    artifacts_manifest,
    ensure_local,
)


def fetch_source(config: ModelConfig, cache_dir: Path) -> ModelConfig:
    """Fetch (or find in the cache) the model's URI; return its resolved config."""
    assert config.source_uri is not None
    try:
        local = ensure_local(config.source_uri, digest=config.digest, cache_dir=cache_dir)
    except StorageError as exc:
        raise ModelLoadFailed(f"cannot fetch {config.source_uri}: {exc.message}") from exc
    return resolve_fetched(config, local)


def verify_digest(config: ModelConfig) -> None:
    """A pinned local model must match its digest; a mismatch refuses to serve. The pin in
    model.yaml covers the artefacts: the directory without model.yaml itself (with version
    directories, the version's directory, which holds no model.yaml)."""
    if config.digest is None or config.source_uri is not None:
        return  # URIs were verified when fetched
    directory = config.directory or config.artifact_path().parent
    try:
        expected = Digest.parse(config.digest)
    except StorageError as exc:
        raise ModelLoadFailed(f"model {config.name!r}: bad digest: {exc.message}") from exc
    actual = artifacts_manifest(directory).digest
    if actual != expected:
        raise ModelLoadFailed(
            DigestMismatch(expected=str(expected), actual=str(actual), where=str(directory)).message
        )


def model_size_bytes(config: ModelConfig) -> int:
    """The model's footprint for the memory budget: the size of its files."""
    directory = config.directory
    if directory is None:
        return 0
    if config.artifact and (directory / config.artifact).is_file():
        return (directory / config.artifact).stat().st_size
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def load_and_warm(
    config: ModelConfig, engines: EngineServices | None = None
) -> ModelAPI | EngineClient:
    """A tensor model (its runtime's `ModelAPI`), or a text engine's client for a runtime
    registered in `generation/registry.py`; `engines` lends a text engine the serving
    process's metrics and queue bound (default: a private registry)."""
    verify_digest(config)
    if is_generative(config.runtime):
        return load_engine(config, engines or standalone_services())
    model = create_model(config)
    directory = config.directory or config.artifact_path().parent
    options = validate_parameters(
        type(model).Parameters, config.parameters, model=config.name, runtime=config.runtime
    )
    model.load(
        LoadContext(
            config=config, directory=directory, parameters=config.parameters, options=options
        )
    )
    if config.warmup:
        request = model.warmup_request(config.name)
        if request is not None:
            model.validate(request)
            model.postprocess(model.predict(model.preprocess(request)), request)
    return model
