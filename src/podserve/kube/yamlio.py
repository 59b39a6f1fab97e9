"""YAML codecs for manifests: read multi-document streams keeping each document's line
(for lint locations), and write them in a stable, diff-friendly form."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from podserve.core.errors import InvalidInput
from podserve.kube.types import Document, Manifest, Source

YAML_SUFFIXES = (".yaml", ".yml", ".json")


def parse_documents(text: str, path: str) -> list[Document]:
    """Every non-empty mapping document of a stream; a `List` is flattened into its items."""
    loader = yaml.SafeLoader(text)
    documents: list[Document] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            data = loader.construct_document(node)
            line = node.start_mark.line + 1
            if data is None:
                continue
            if not isinstance(data, dict):
                raise InvalidInput(f"{path}:{line}: a manifest must be a mapping")
            documents.extend(_flatten(data, Source(path, line)))
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{path} is not valid YAML: {exc}") from exc
    finally:
        loader.dispose()
    return documents


def _flatten(data: Manifest, source: Source) -> list[Document]:
    if data.get("kind") == "List" or str(data.get("kind", "")).endswith("List"):
        items = data.get("items") or []
        return [Document(item, source) for item in items if isinstance(item, dict)]
    return [Document(data, source)]


def read_paths(paths: Sequence[str]) -> list[Document]:
    """Documents from files, directories (recursively, YAML files in name order) or `-`."""
    documents: list[Document] = []
    for name in paths:
        if name == "-":
            documents.extend(parse_documents(sys.stdin.read(), "-"))
            continue
        path = Path(name)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.suffix in YAML_SUFFIXES and p.is_file())
        elif path.is_file():
            files = [path]
        else:
            raise InvalidInput(f"{name}: no such file or directory")
        for file in files:
            documents.extend(parse_documents(file.read_text(), str(file)))
    return documents


class _Dumper(yaml.SafeDumper):
    """Block style, no anchors, multi-line strings as literal blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_representer)


def dump(manifest: Manifest) -> str:
    # Key order is the order the renderer built (apiVersion, kind, metadata, spec ...), which
    # is deterministic and reads like hand-written YAML; width keeps PromQL on one line.
    return yaml.dump(
        manifest, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096
    )


def dump_all(manifests: Iterable[Manifest]) -> str:
    return "".join(f"---\n{dump(m)}" for m in manifests)
