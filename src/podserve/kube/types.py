"""Shared types of the Kubernetes tooling."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# A Kubernetes object as YAML gives it: manifests stay plain data from file to file, and
# every helper that reads one goes through the accessors in `manifest.py`.
Manifest = dict[str, Any]


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Source:
    """Where a document came from: a file (or `-` for stdin) and its first line."""

    path: str
    line: int


@dataclass(frozen=True, slots=True)
class Document:
    manifest: Manifest
    source: Source
