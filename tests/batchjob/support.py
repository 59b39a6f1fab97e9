"""Shared helpers for the batch job tests: example models, input files, a fake model."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson

from podserve.batchjob import LoadedModel, load_model
from podserve.config.model_config import ModelConfig, TensorConfig
from podserve.core.tensors import Datatype
from podserve.runtimes import LoadContext, ModelAPI, create_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
IRIS = EXAMPLES / "iris"
SENTIMENT = EXAMPLES / "sentiment"


def load_example(name: str) -> LoadedModel:
    return load_model(EXAMPLES / name)


def fake_model(**parameters: object) -> ModelAPI:
    """`y = 2x` on FP32 input "x" of shape [-1, 2]; `fail_value` makes a batch raise."""
    config = ModelConfig(
        name="fake",
        runtime="fake",
        inputs=[TensorConfig(name="x", datatype=Datatype.FP32, shape=[-1, 2])],
        outputs=[TensorConfig(name="y", datatype=Datatype.FP32, shape=[-1, 2])],
        parameters=dict(parameters),
    )
    model = create_model(config)
    model.load(LoadContext(config=config, directory=Path(".")))
    return model


def iris_rows(count: int, *, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "id": i,
            "inputs": {
                "features": [
                    round(rng.uniform(4.0, 8.0), 1),
                    round(rng.uniform(2.0, 4.5), 1),
                    round(rng.uniform(1.0, 7.0), 1),
                    round(rng.uniform(0.1, 2.5), 1),
                ]
            },
        }
        for i in range(count)
    ]


def jsonl_line(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record) + b"\n"


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(jsonl_line(r) for r in records))
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]
