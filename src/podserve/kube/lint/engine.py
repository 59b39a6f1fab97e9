"""Runs the rules over documents and applies the ignores (`--ignore RULE` and the
`podserve.dev/lint-ignore` annotation, on the object or its pod template)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from podserve.kube import conventions as c
from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Finding, Rule
from podserve.kube.lint.pods import annotations_of, object_label, pod_view
from podserve.kube.types import Document, Severity


@dataclass(frozen=True, slots=True)
class LintResult:
    findings: tuple[Finding, ...]
    documents: int

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity is Severity.ERROR)

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.severity is Severity.WARNING)


def ignored_rules(doc: Document) -> set[str]:
    texts = [annotations_of(doc.manifest).get(c.LINT_IGNORE, "")]
    view = pod_view(doc)
    if view is not None:
        texts.append(view.annotations.get(c.LINT_IGNORE, ""))
    return {part.strip() for text in texts for part in text.split(",") if part.strip()}


def lint_documents(
    documents: Sequence[Document],
    rules: Iterable[Rule],
    ignore: Iterable[str] = (),
) -> LintResult:
    context = LintContext.build(list(documents))
    skipped = set(ignore)
    findings: list[Finding] = []
    for rule in rules:
        if rule.id in skipped:
            continue
        for hit in rule.check(context):
            if rule.id in ignored_rules(hit.document):
                continue
            findings.append(
                Finding(
                    rule_id=rule.id,
                    severity=rule.severity,
                    object=object_label(hit.document.manifest),
                    field=hit.field,
                    message=hit.message,
                    fix=rule.fix,
                    source=hit.document.source,
                )
            )
    order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
    findings.sort(
        key=lambda f: (f.source.path, f.source.line, order[f.severity], f.rule_id, f.field)
    )
    return LintResult(tuple(dict.fromkeys(findings)), len(documents))
