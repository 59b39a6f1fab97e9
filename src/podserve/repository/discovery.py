"""Find model configs: every sub-directory of the model repository that holds a
`model.yaml`, plus the `--model NAME=PATH[:runtime]` references.

A reference to a directory with a `model.yaml` uses it (name and runtime overridden by the
reference); a reference to a single file gets a config inferred from its extension.
"""

from __future__ import annotations

from pathlib import Path

from podserve.config.model_config import MODEL_CONFIG_FILENAME, ModelConfig, load_model_config
from podserve.config.settings import ModelRef
from podserve.core.errors import InvalidInput

_RUNTIME_BY_SUFFIX = {
    ".joblib": "sklearn",
    ".pkl": "sklearn",
    ".skops": "sklearn",
    ".onnx": "onnx",
    ".pt": "torchscript",
    ".torchscript": "torchscript",
}


def discover_models(repository: Path | None, refs: list[ModelRef]) -> list[ModelConfig]:
    configs: list[ModelConfig] = []
    if repository is not None:
        if not repository.is_dir():
            raise InvalidInput(f"model repository {repository} is not a directory")
        for child in sorted(repository.iterdir()):
            if (child / MODEL_CONFIG_FILENAME).is_file():
                configs.append(load_model_config(child))
    for ref in refs:
        configs.append(_config_from_ref(ref))
    names = [c.name for c in configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidInput(f"model name(s) defined twice: {duplicates}")
    return configs


def _config_from_ref(ref: ModelRef) -> ModelConfig:
    path = ref.path
    if path.is_dir() and (path / MODEL_CONFIG_FILENAME).is_file():
        base = load_model_config(path)
        overrides: dict[str, object] = {"name": ref.name}
        if ref.runtime:
            overrides["runtime"] = ref.runtime
        return base.model_copy(update=overrides)
    if path.is_file():
        runtime = ref.runtime or _RUNTIME_BY_SUFFIX.get(path.suffix)
        if runtime is None:
            raise InvalidInput(
                f"--model {ref.name}={path}: cannot tell the runtime from {path.suffix!r}; "
                "add :runtime (e.g. :sklearn, :onnx)"
            )
        return ModelConfig(
            name=ref.name, runtime=runtime, artifact=path.name, directory=path.parent.resolve()
        )
    raise InvalidInput(
        f"--model {ref.name}={path}: not a file, nor a directory with a {MODEL_CONFIG_FILENAME}"
    )
