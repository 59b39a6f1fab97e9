"""Read an MLflow model directory's `MLmodel` file to choose the runtime that serves it.

MLmodel is YAML with a `flavors:` mapping, one entry per way the model can be loaded
(https://mlflow.org/docs/latest/ml/model/#storage-format). podserve serves two flavors
with its own runtimes, never with MLflow's pyfunc loader (which would need `mlflow`, the
model's pinned pip environment and its code at serving time):

    sklearn   `pickled_model`: the estimator file; `serialization_format` skops (MLflow
              3's default), pickle or cloudpickle (`mlflow/sklearn/__init__.py`)
    onnx      `data`: the .onnx file (`mlflow/onnx/__init__.py`)

`python_function` rides along with every flavor and is not one by itself here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from podserve.core.errors import ModelLoadFailed

MLMODEL_FILENAME = "MLmodel"

# flavor -> (podserve runtime, the flavor's key naming the model file)
_SUPPORTED: dict[str, tuple[str, str]] = {
    "sklearn": ("sklearn", "pickled_model"),
    "onnx": ("onnx", "data"),
}
_SERIALIZATIONS = ("skops", "pickle", "cloudpickle")


@dataclass(frozen=True, slots=True)
class MlflowFlavor:
    flavor: str
    runtime: str
    artifact: Path  # the model file, inside the model directory


def is_mlflow_model(directory: Path) -> bool:
    return directory.is_dir() and (directory / MLMODEL_FILENAME).is_file()


def read_mlmodel(directory: Path, *, runtime: str | None = None) -> MlflowFlavor:
    """The flavor podserve serves `directory` with; `runtime` (a `:runtime` the user gave)
    picks among the flavors. Raises ModelLoadFailed naming the flavors when none fits."""
    path = directory / MLMODEL_FILENAME
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ModelLoadFailed(f"cannot read {path}: {exc}") from exc
    flavors = doc.get("flavors") if isinstance(doc, dict) else None
    if not isinstance(flavors, dict) or not flavors:
        raise ModelLoadFailed(f"{path} lists no flavors")
    candidates = [f for f in _SUPPORTED if f in flavors]
    if runtime is not None:
        candidates = [f for f in candidates if _SUPPORTED[f][0] == runtime]
    if not candidates:
        listed = ", ".join(sorted(str(f) for f in flavors))
        wanted = f" with runtime {runtime!r}" if runtime is not None else ""
        raise ModelLoadFailed(
            f"the MLflow model in {directory} has the flavor(s) {listed}; podserve serves "
            f"the sklearn and onnx flavors{wanted} (log the model with mlflow.sklearn or "
            "mlflow.onnx, or serve it with runtime: custom)"
        )
    flavor = candidates[0]
    body = flavors[flavor]
    runtime_name, file_key = _SUPPORTED[flavor]
    rel = body.get(file_key) if isinstance(body, dict) else None
    if not isinstance(rel, str) or not rel:
        raise ModelLoadFailed(f"{path}: the {flavor} flavor names no {file_key}")
    if flavor == "sklearn":
        serialization = body.get("serialization_format", "cloudpickle")
        if serialization not in _SERIALIZATIONS:
            raise ModelLoadFailed(
                f"{path}: sklearn serialization_format {serialization!r} is not one of "
                f"{', '.join(_SERIALIZATIONS)}"
            )
    artifact = (directory / rel).resolve()
    if not artifact.is_relative_to(directory.resolve()) or not artifact.is_file():
        raise ModelLoadFailed(f"{path}: the {flavor} flavor's {file_key} {rel!r} is not a file")
    return MlflowFlavor(flavor, runtime_name, artifact)
