"""The baseline podserve is measured against: what a user would hand-roll.

A plain FastAPI app that loads one model at import and calls it once per request, with
no batching, no admission control and no metrics. It accepts the Open Inference
Protocol v2 JSON body at `POST /v2/models/{name}/infer` and answers in the same shape,
so the load generator sends both servers the same bytes. The handler is a plain `def`,
as FastAPI's documentation recommends for blocking calls (it runs in the threadpool).

Run it as a user would, one uvicorn worker with default settings:

    BASELINE_MODEL_DIR=examples/models/iris uvicorn baseline_app:app --app-dir benchmarks

The model directory's `model.yaml` only says which file to load and which method to call
(`.skops`/`.joblib` scikit-learn estimators, `.onnx` graphs).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

_DTYPES = {"FP32": np.float32, "FP64": np.float64, "INT32": np.int32, "INT64": np.int64}
_DATATYPE_NAMES = {
    np.dtype(np.float32): "FP32",
    np.dtype(np.float64): "FP64",
    np.dtype(np.int32): "INT32",
    np.dtype(np.int64): "INT64",
}


class InferInput(BaseModel):
    name: str
    shape: list[int]
    datatype: str
    data: list[Any]


class InferRequest(BaseModel):
    inputs: list[InferInput]


def _load(model_dir: Path) -> tuple[str, Any]:
    config = yaml.safe_load((model_dir / "model.yaml").read_text())
    name = config.get("name", model_dir.name)
    if config.get("runtime") == "embedding":
        return name, _load_encoder(config)
    artifact = model_dir / config["artifact"]
    method = config.get("parameters", {}).get("method", "predict")
    if artifact.suffix == ".onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(artifact), providers=["CPUExecutionProvider"])
        output_names = [o.name for o in session.get_outputs()]
        input_name = session.get_inputs()[0].name

        def run_onnx(x: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any]]:
            return dict(zip(output_names, session.run(None, {input_name: x}), strict=True))

        return name, run_onnx
    if artifact.suffix == ".skops":
        import skops.io

        estimator = skops.io.load(artifact, trusted=skops.io.get_untrusted_types(file=artifact))
    else:
        import joblib

        estimator = joblib.load(artifact)
    output_name = config.get("outputs", [{}])[0].get("name", method)
    predict = getattr(estimator, method)

    def run_sklearn(x: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any]]:
        return {output_name: np.asarray(predict(x))}

    return name, run_sklearn


def _load_encoder(config: dict[str, Any]) -> Any:
    """A sentence encoder as a user would hand-roll it from the model card: tokenise,
    encode, mean-pool over the mask, L2-normalise (what sentence-transformers does)."""
    import importlib

    import torch
    from transformers import AutoModel, AutoTokenizer

    package = importlib.import_module(config["parameters"]["package"])
    getter = getattr(package, "get_model_path", None)
    directory = str(getter() if callable(getter) else package.MODEL_DIR)
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    encoder = AutoModel.from_pretrained(directory, local_files_only=True).eval()

    def run_encoder(texts: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any]]:
        encoded = tokenizer(
            [str(t) for t in texts.ravel()],
            padding=True,
            truncation=True,
            max_length=256,
            return_tensors="pt",
        )
        with torch.inference_mode():
            hidden = encoder(**encoded).last_hidden_state
            mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return {"embedding": pooled.numpy()}

    return run_encoder


MODEL_NAME, MODEL = _load(Path(os.environ.get("BASELINE_MODEL_DIR", "examples/models/iris")))
app = FastAPI()


@app.get("/health")
def health() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/v2/models/{name}/infer")
def infer(name: str, request: InferRequest) -> dict[str, Any]:
    if name != MODEL_NAME:
        raise HTTPException(404, f"unknown model {name!r}")
    tensor = request.inputs[0]
    dtype = object if tensor.datatype == "BYTES" else _DTYPES[tensor.datatype]
    x = np.asarray(tensor.data, dtype=dtype).reshape(tensor.shape)
    outputs = MODEL(x)
    return {
        "model_name": name,
        "outputs": [
            {
                "name": out_name,
                "shape": list(value.shape),
                "datatype": _DATATYPE_NAMES.get(value.dtype, "BYTES"),
                "data": value.ravel().tolist(),
            }
            for out_name, value in outputs.items()
        ],
    }
