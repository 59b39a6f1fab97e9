"""MLflow model URIs, parsed into what they name.

    models:/<name>/<version>    one registered model version (a number, or `latest`)
    models:/<name>@<alias>      the version an alias points at *now* (it can move)
    runs:/<run_id>/<path>       artefacts a run logged under <path>

The forms are MLflow's own (`mlflow/store/artifact/utils/models.py`, `_parse_model_uri`,
and `mlflow/store/artifact/runs_artifact_repo.py`, `parse_runs_uri`). Stage names
(`models:/m/Production`) are refused: MLflow deprecated stages for aliases in 2.9.
`models://<profile>/...` (a Databricks profile) is refused by uri.py's one-slash rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from podserve.storage.errors import InvalidModelURI

# Registered model names: anything but '/' and '@' (which delimit version and alias), and
# no surrounding blanks. MLflow's own validation is looser about characters, not about these.
_NAME = r"[^/@\s](?:[^/@]*[^/@\s])?"
_MODEL_VERSION = re.compile(rf"^(?P<name>{_NAME})/(?P<version>[0-9]+|latest)$")
_MODEL_ALIAS = re.compile(rf"^(?P<name>{_NAME})@(?P<alias>[A-Za-z0-9_-]+)$")
_RUN = re.compile(r"^(?P<run_id>[0-9A-Za-z_-]+)(?:/(?P<path>.*))?$")


@dataclass(frozen=True, slots=True)
class RegisteredVersion:
    """`models:/name/3`, or `models:/name/latest` (the highest version number)."""

    name: str
    version: str


@dataclass(frozen=True, slots=True)
class RegisteredAlias:
    name: str
    alias: str


@dataclass(frozen=True, slots=True)
class RunArtifacts:
    """`path` is '' for the run's whole artefact root."""

    run_id: str
    path: str


MlflowRef = RegisteredVersion | RegisteredAlias | RunArtifacts


def parse_mlflow_location(text: str, raw: str) -> str:
    """Validate `raw` (`models:/...` or `runs:/...`, without a pin) and return the part
    after `scheme:/`, the `ModelURI.location`. `text` is what the user wrote, for errors."""
    scheme, _, location = raw.partition(":/")
    mlflow_ref(scheme, location, text=text)
    return location


def mlflow_ref(scheme: str, location: str, *, text: str | None = None) -> MlflowRef:
    shown = text if text is not None else f"{scheme}:/{location}"
    if scheme == "runs":
        run = _RUN.match(location)
        if run is None:
            raise InvalidModelURI(f"{shown!r}: expected runs:/<run_id>/<path>")
        path = (run.group("path") or "").strip("/")
        if any(part in (".", "..") for part in path.split("/")):
            raise InvalidModelURI(f"{shown!r}: the artefact path may not contain . or ..")
        return RunArtifacts(run.group("run_id"), path)
    if scheme != "models":
        raise InvalidModelURI(f"{shown!r} is not an MLflow URI (models:/ or runs:/)")
    if alias := _MODEL_ALIAS.match(location):
        return RegisteredAlias(alias.group("name"), alias.group("alias"))
    if version := _MODEL_VERSION.match(location):
        return RegisteredVersion(version.group("name"), version.group("version"))
    head, _, tail = location.rpartition("/")
    if head and tail and not tail.isdigit():
        raise InvalidModelURI(
            f"{shown!r}: {tail!r} is not a version number; MLflow stages are deprecated, "
            f"point an alias at the version and use models:/{head}@<alias>"
        )
    raise InvalidModelURI(f"{shown!r}: expected models:/<name>/<version> or models:/<name>@<alias>")
