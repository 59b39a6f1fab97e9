"""What a lint rule is and what it reports."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from podserve.kube.lint.context import LintContext
from podserve.kube.types import Document, Severity, Source


@dataclass(frozen=True, slots=True)
class Hit:
    """One problem a rule found: the document, the field, and what is wrong there."""

    document: Document
    field: str
    message: str


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    severity: Severity
    title: str
    why: str  # the operational lesson, one paragraph
    fix: str
    check: Callable[[LintContext], Iterable[Hit]]


@dataclass(frozen=True, slots=True)
class Finding:
    rule_id: str
    severity: Severity
    object: str  # Kind/namespace/name
    field: str
    message: str
    fix: str
    source: Source
