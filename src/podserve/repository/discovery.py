"""Find model configs: every sub-directory of the model repository that holds a
`model.yaml`, plus the `--model NAME=SOURCE[:runtime]` references.

Layouts:
    <repo>/<name>/model.yaml + artefacts             one version (model.yaml's `version`)
    <repo>/<name>/model.yaml + <name>/<N>/artefacts  one version per numeric directory;
                                                     the highest is `latest`

A reference to a directory with a `model.yaml` uses it (name and runtime overridden by the
reference); a reference to a single file gets a config inferred from its extension; a
reference to a URI gets a provisional config, resolved the same way once fetched.
"""

from __future__ import annotations

from pathlib import Path

from podserve.config.model_config import MODEL_CONFIG_FILENAME, ModelConfig, load_model_config
from podserve.config.settings import ModelRef
from podserve.core.errors import InvalidInput
from podserve.storage.mlflow_model import is_mlflow_model, read_mlmodel

# A model named by URI whose runtime is not given is resolved after fetching.
AUTO_RUNTIME = "auto"

_RUNTIME_BY_SUFFIX = {
    ".joblib": "sklearn",
    ".pkl": "sklearn",
    ".skops": "sklearn",
    ".onnx": "onnx",
    ".pt": "torchscript",
    ".pt2": "torchscript",
    ".torchscript": "torchscript",
}


def discover_models(repository: Path | None, refs: list[ModelRef]) -> list[ModelConfig]:
    configs: list[ModelConfig] = []
    if repository is not None:
        if not repository.is_dir():
            raise InvalidInput(f"model repository {repository} is not a directory")
        for child in sorted(repository.iterdir()):
            if (child / MODEL_CONFIG_FILENAME).is_file():
                configs.extend(with_versions(load_model_config(child)))
    for ref in refs:
        configs.extend(_configs_from_ref(ref))
    keys = [(c.name, c.version) for c in configs]
    duplicates = sorted({f"{n} version {v}" for n, v in keys if keys.count((n, v)) > 1})
    if duplicates:
        raise InvalidInput(f"model(s) defined twice: {duplicates}")
    return configs


def with_versions(base: ModelConfig) -> list[ModelConfig]:
    """One config per numeric version directory, or the config itself when there are none."""
    directory = base.directory
    if directory is None or not directory.is_dir():
        return [base]
    numbered = sorted(
        (d for d in directory.iterdir() if d.is_dir() and d.name.isdigit()),
        key=lambda d: int(d.name),
    )
    if not numbered:
        return [base]
    latest = numbered[-1].name
    return [
        base.model_copy(
            update={
                "version": d.name,
                "directory": d.resolve(),
                "preload": base.preload and (base.version_policy == "all" or d.name == latest),
            }
        )
        for d in numbered
    ]


def resolve_fetched(provisional: ModelConfig, local: Path) -> ModelConfig:
    """The real config of a model fetched from `provisional.source_uri` into `local`."""
    runtime = None if provisional.runtime == AUTO_RUNTIME else provisional.runtime
    ref = ModelRef(name=provisional.name, source=str(local), runtime=runtime)
    if is_mlflow_model(local):  # models:/ and runs:/ sources: MLmodel names flavor and file
        flavor = read_mlmodel(local, runtime=runtime)
        ref = ModelRef(name=provisional.name, source=str(flavor.artifact), runtime=flavor.runtime)
    elif local.is_dir() and not (local / MODEL_CONFIG_FILENAME).is_file():
        files = [f for f in local.iterdir() if f.is_file() and not f.name.startswith(".")]
        if len(files) != 1:
            raise InvalidInput(
                f"model {provisional.name!r} fetched from {provisional.source_uri} has no "
                f"{MODEL_CONFIG_FILENAME} and {len(files)} files; add a {MODEL_CONFIG_FILENAME}"
            )
        ref = ModelRef(name=provisional.name, source=str(files[0]), runtime=runtime)
    (config,) = _configs_from_ref(ref)[-1:]
    return config.model_copy(update={"source_uri": provisional.source_uri})


def _configs_from_ref(ref: ModelRef) -> list[ModelConfig]:
    if ref.is_remote:
        return [
            ModelConfig(name=ref.name, runtime=ref.runtime or AUTO_RUNTIME, source_uri=ref.source)
        ]
    path = ref.path
    if path.is_dir() and (path / MODEL_CONFIG_FILENAME).is_file():
        base = load_model_config(path)
        overrides: dict[str, object] = {"name": ref.name}
        if ref.runtime:
            overrides["runtime"] = ref.runtime
        return with_versions(base.model_copy(update=overrides))
    if path.is_file():
        runtime = ref.runtime or _RUNTIME_BY_SUFFIX.get(path.suffix)
        if runtime is None:
            raise InvalidInput(
                f"--model {ref.name}={path}: cannot tell the runtime from {path.suffix!r}; "
                "add :runtime (e.g. :sklearn, :onnx)"
            )
        return [
            ModelConfig(
                name=ref.name, runtime=runtime, artifact=path.name, directory=path.parent.resolve()
            )
        ]
    raise InvalidInput(
        f"--model {ref.name}={path}: not a file, nor a directory with a {MODEL_CONFIG_FILENAME}"
    )
