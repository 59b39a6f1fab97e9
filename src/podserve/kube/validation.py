"""Schema validation of manifests, offline: built-in kinds against the Kubernetes OpenAPI
schemas bundled with kubernetes-validate (strict: unknown fields are errors), custom
resources against their CRD's openAPIV3Schema (kubernetes-validate only warns on those).
The CRDs ship inside the package (`podserve/kube/crds/`, upstream sources and licences in its
SOURCES.md), so a plain install validates without anything beside it.
CEL rules (x-kubernetes-validations) are evaluated by podserve.kube.apiserver.cel, the
API server's cross-field checks by podserve.kube.apiserver; `podserve lint --strict` runs all
three."""

from __future__ import annotations

import importlib.resources
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from podserve.core.errors import InvalidInput
from podserve.kube.types import Manifest

# libyaml's loader when PyYAML was built with it: the bundled CRDs (the HTTPRoute one alone is
# 300 kB) parse in a fraction of the pure-Python loader's 2 s.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Kubernetes minor versions every rendered object is checked against. 1.30 is the oldest:
# the preStop `sleep` action became beta (on by default) there.
KUBERNETES_VERSIONS = ("1.30", "1.33", "1.35", "1.37")


@dataclass(frozen=True, slots=True)
class SchemaProblem:
    object: str
    schema: str  # "kubernetes 1.33" or the CRD's name
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.object} ({self.schema}) at {self.path or '(root)'}: {self.message}"


def object_ref(manifest: Manifest) -> str:
    meta = manifest.get("metadata") or {}
    return f"{manifest.get('kind')}/{meta.get('name')}"


def _strict(schema: Any) -> Any:
    """CRD schemas prune unknown fields instead of rejecting them; reject them here, so a
    typo in a rendered custom resource fails a test instead of vanishing at apply time."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: _strict(value) for key, value in schema.items()}
    if (
        "properties" in result
        and "additionalProperties" not in result
        and not result.get("x-kubernetes-preserve-unknown-fields")
    ):
        result["additionalProperties"] = False
    return result


def _schemas_of(texts: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Mapping[str, Any]]:
    schemas: dict[tuple[str, str], Mapping[str, Any]] = {}
    for source, text in texts:
        for crd in yaml.load_all(text, Loader=_LOADER):
            if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
                continue
            try:
                group = crd["spec"]["group"]
                kind = crd["spec"]["names"]["kind"]
                for version in crd["spec"]["versions"]:
                    schema = version["schema"]["openAPIV3Schema"]
                    schemas[(f"{group}/{version['name']}", kind)] = _strict(schema)
            except (KeyError, TypeError) as error:
                raise InvalidInput(f"{source}: not a CRD with openAPIV3Schema ({error})") from None
    return schemas


@dataclass(frozen=True, slots=True)
class CrdCatalog:
    """openAPIV3Schema per (apiVersion, kind), from a directory of CRD YAML files."""

    schemas: Mapping[tuple[str, str], Mapping[str, Any]]

    @classmethod
    def bundled(cls, extra_dirs: Iterable[Path] = ()) -> CrdCatalog:
        """The CRDs shipped inside the package (`podserve/kube/crds`, sources and licences in
        its SOURCES.md), plus those in `extra_dirs`; a later file wins for the same kind."""
        shipped = importlib.resources.files("podserve.kube") / "crds"
        texts = [
            (entry.name, entry.read_text(encoding="utf-8"))
            for entry in sorted(shipped.iterdir(), key=lambda e: e.name)
            if entry.name.endswith(".yaml")
        ]
        schemas = _schemas_of(texts)
        for directory in extra_dirs:
            schemas.update(cls.load(directory).schemas)
        return cls(schemas)

    @classmethod
    def load(cls, directory: Path) -> CrdCatalog:
        """Only the CRDs in `directory` (every `*.yaml` / `*.yml` file)."""
        if not directory.is_dir():
            raise InvalidInput(f"CRD directory {directory} does not exist")
        paths = sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])
        schemas = _schemas_of([(str(path), path.read_text()) for path in paths])
        if not schemas:
            raise InvalidInput(f"no CRDs in {directory}")
        return cls(schemas)

    def schema_for(self, manifest: Manifest) -> Mapping[str, Any] | None:
        return self.schemas.get((str(manifest.get("apiVersion")), str(manifest.get("kind"))))


def validate_custom(manifest: Manifest, catalog: CrdCatalog) -> list[SchemaProblem]:
    import jsonschema

    schema = catalog.schema_for(manifest)
    if schema is None:
        return [
            SchemaProblem(
                object_ref(manifest),
                "crd",
                "",
                f"no CRD for {manifest.get('apiVersion')} {manifest.get('kind')}",
            )
        ]
    # OpenAPI v3.0 schemas are close to JSON Schema draft 4 (boolean exclusiveMinimum).
    validator = jsonschema.Draft4Validator(schema)
    return [
        SchemaProblem(
            object_ref(manifest),
            f"CRD {manifest.get('kind')}",
            ".".join(str(p) for p in error.absolute_path),
            error.message,
        )
        for error in sorted(validator.iter_errors(manifest), key=lambda e: list(e.path).__str__())
    ]


@cache
def _builtin_kinds(version: str) -> frozenset[tuple[str, str]]:
    """(kind, group-version) pairs kubernetes-validate has schemas for, from its file names
    `<kind>-<group>-<version>.json` (`deployment-apps-v1.json`, `service-v1.json`)."""
    root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    folder = next(p for p in root.iterdir() if p.name == f"v{version}.0-local-strict")
    pairs = set()
    for entry in folder.iterdir():
        if entry.name.endswith(".json") and "-" in entry.name:
            kind, _, rest = entry.name.removesuffix(".json").partition("-")
            pairs.add((kind, rest))
    return frozenset(pairs)


def is_builtin(manifest: Manifest) -> bool:
    group_version = str(manifest.get("apiVersion", ""))
    group, _, version = group_version.rpartition("/")
    # kubernetes-validate files are <kind>-<group without domain>-<version>.json
    short = group.split(".")[0]
    suffix = f"{short}-{version}" if group else version
    kind = str(manifest.get("kind", "")).lower()
    return (kind, suffix) in _builtin_kinds(KUBERNETES_VERSIONS[-1])


def validate_builtin(manifest: Manifest, version: str) -> list[SchemaProblem]:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(manifest, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [
            SchemaProblem(
                object_ref(manifest),
                f"kubernetes {version}",
                ".".join(str(p) for p in error.path),
                error.message,
            )
        ]
    return []


def validate_manifests(
    manifests: Iterable[Manifest],
    catalog: CrdCatalog,
    versions: Iterable[str] = KUBERNETES_VERSIONS,
) -> list[SchemaProblem]:
    problems: list[SchemaProblem] = []
    chosen = tuple(versions)
    for manifest in manifests:
        if is_builtin(manifest):
            for version in chosen:
                problems += validate_builtin(manifest, version)
        else:
            problems += validate_custom(manifest, catalog)
    return problems
