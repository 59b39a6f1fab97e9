"""benchmarks/table.py's models and workloads: W1 (a scikit-learn MLP built here, over
OIP v2 FP32) and W2 (all-MiniLM-L6-v2 from examples/models/minilm, over OIP v2 BYTES), the
model repositories podserve serves them from, and the request bodies sent to them."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import servers
import yaml

from podserve.bench.wire import encode_request
from podserve.bench.workloads import PreparedRequest, Target

REPO_ROOT = servers.REPO_ROOT
W1_FEATURES = 32
SENTENCES = (
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "A model server turns a trained network into an endpoint other programs can call.",
    "Batching several requests together lets the processor do more useful work per call.",
    "The weather forecast says it will rain tomorrow afternoon in the northern valleys.",
    "She read the paper twice before she understood why the proof needed a lemma.",
    "Kubernetes restarts a container when its liveness probe keeps failing for too long.",
    "Sentence embeddings map text to vectors so that similar meanings end up close together.",
    "He ordered a coffee, opened his laptop and started to answer the morning's emails.",
)


def build_w1(directory: Path) -> Path:
    import warnings

    import joblib
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    rng = np.random.default_rng(0)
    x = rng.random((2000, W1_FEATURES), dtype=np.float32)
    y = rng.integers(0, 10, 2000)
    model = MLPClassifier(hidden_layer_sizes=(256, 256), max_iter=3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(x, y)
    directory.mkdir(parents=True)
    joblib.dump(model, directory / "model.joblib")
    config = {
        "name": "w1",
        "runtime": "sklearn",
        "artifact": "model.joblib",
        "inputs": [{"name": "features", "datatype": "FP32", "shape": [-1, W1_FEATURES]}],
        "outputs": [{"name": "predict", "datatype": "INT64", "shape": [-1]}],
        "batching": {"max_batch_size": 64},
    }
    (directory / "model.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return directory


def build_w2(directory: Path) -> Path:
    shutil.copytree(REPO_ROOT / "examples" / "models" / "minilm", directory)
    config = yaml.safe_load((directory / "model.yaml").read_text())
    config["name"] = "w2"
    (directory / "model.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return directory


def repository(root: Path, models: dict[str, Path], *, batching: bool) -> Path:
    for name, source in models.items():
        copy = root / name
        shutil.copytree(source, copy)
        if not batching:
            path = copy / "model.yaml"
            config = yaml.safe_load(path.read_text())
            config["batching"] = {**config.get("batching", {}), "enabled": False}
            path.write_text(yaml.safe_dump(config, sort_keys=False))
    return root


def w1_rows(variants: int = 64) -> list[list[float]]:
    rng = np.random.default_rng(1)
    return [rng.random(W1_FEATURES).astype(np.float32).round(6).tolist() for _ in range(variants)]


def w1_body(row: list[float]) -> dict[str, Any]:
    return {
        "inputs": [{"name": "features", "shape": [1, W1_FEATURES], "datatype": "FP32", "data": row}]
    }


def w2_body(text: str) -> dict[str, Any]:
    return {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [text]}]}


def bodies(workload: str) -> list[bytes]:
    if workload == "w1":
        return [orjson.dumps(w1_body(row)) for row in w1_rows()]
    return [orjson.dumps(w2_body(text)) for text in SENTENCES]


@dataclass(frozen=True, slots=True)
class BodiesWorkload:
    """Fixed OIP v2 bodies to `POST /v2/models/{model}/infer` (the Workload protocol)."""

    model: str
    payloads: tuple[bytes, ...]

    def describe(self) -> str:
        return f"OIP v2 infer on {self.model!r}"

    def prepare(self, target: Target, headers: Any) -> list[PreparedRequest]:
        path = f"/v2/models/{self.model}/infer"
        return [
            PreparedRequest(encode_request("POST", target.authority, path, body, headers))
            for body in self.payloads
        ]
