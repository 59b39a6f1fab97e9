"""Runtime name -> model class, imported lazily so the core never pulls in a framework."""

from __future__ import annotations

import importlib

from podserve.config.model_config import ModelConfig
from podserve.core.errors import ModelLoadFailed
from podserve.runtimes.base import ModelAPI
from podserve.runtimes.custom import import_model_class

_BUILTIN: dict[str, str] = {
    "fake": "podserve.runtimes.fake:FakeModel",
    "sklearn": "podserve.runtimes.sklearn:SklearnModel",
    "onnx": "podserve.runtimes.onnx:OnnxModel",
    "torchscript": "podserve.runtimes.torch:TorchScriptModel",
    "torch": "podserve.runtimes.torch:SafetensorsTorchModel",
    "embedding": "podserve.runtimes.embedding:SentenceEmbeddingModel",
}


def known_runtimes() -> tuple[str, ...]:
    return (*sorted(_BUILTIN), "custom")


def import_object(path: str) -> object:
    """Import `package.module:attr`."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ModelLoadFailed(f"import path {path!r} must look like 'package.module:Class'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelLoadFailed(f"cannot import {module_name!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ModelLoadFailed(f"module {module_name!r} has no attribute {attr!r}") from None


def create_model(config: ModelConfig) -> ModelAPI:
    """Instantiate (not load) the model class the config names."""
    if config.runtime == "custom":
        if not config.model_class:
            raise ModelLoadFailed(f"model {config.name!r}: runtime 'custom' needs model_class")
        path = config.model_class
    else:
        try:
            path = _BUILTIN[config.runtime]
        except KeyError:
            raise ModelLoadFailed(
                f"model {config.name!r}: unknown runtime {config.runtime!r}; "
                f"known: {', '.join(known_runtimes())}"
            ) from None
    if config.runtime == "custom":
        # User code ships in the model directory (module.py beside model.yaml) or as an
        # installed package; see podserve.runtimes.custom.
        cls = import_model_class(path, config.directory)
    else:
        cls = import_object(path)
    if not (isinstance(cls, type) and issubclass(cls, ModelAPI)):
        raise ModelLoadFailed(f"{path} is not a subclass of podserve.runtimes.ModelAPI")
    instance = cls()
    instance.inputs = config.input_specs()
    instance.outputs = config.output_specs()
    return instance
