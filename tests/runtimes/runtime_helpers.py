"""Helpers for the runtime tests: load a model directory the way the server does, and
run one request through validate -> preprocess -> predict -> postprocess."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from podserve.config.model_config import load_model_config
from podserve.core.tensors import Datatype, InferRequest, RequestedOutput, Tensor
from podserve.runtimes import LoadContext, ModelAPI, create_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"


def load_dir(directory: Path) -> ModelAPI:
    config = load_model_config(directory)
    model = create_model(config)
    assert config.directory is not None
    model.load(LoadContext(config=config, directory=config.directory))
    return model


def request(*tensors: Tensor, outputs: tuple[str, ...] = ()) -> InferRequest:
    return InferRequest(
        model_name="m",
        inputs=tensors,
        outputs=tuple(RequestedOutput(name) for name in outputs),
    )


def tensor(name: str, data: Any, datatype: Datatype | None = None) -> Tensor:
    array = np.asarray(data)
    if datatype is Datatype.BYTES:
        array = np.array(data, dtype=object)
    return Tensor(name, datatype or Datatype.from_numpy(array.dtype), array)


def infer(model: ModelAPI, req: InferRequest) -> dict[str, Tensor]:
    """The engine's path for one request: validate, preprocess, predict, postprocess."""
    model.validate(req)
    outputs = model.postprocess(model.predict(model.preprocess(req)), req)
    return {t.name: t for t in outputs}


def write_yaml(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.yaml").write_text(text)
    return directory
