"""Runs the rules over documents and applies the ignores (`--ignore RULE` and the
`podserve.dev/lint-ignore` annotation, on the object or its pod template)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from podserve.kube import conventions as c
from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Finding, Hit, Rule
from podserve.kube.lint.pods import annotations_of, object_label, pod_view
from podserve.kube.lint.rules import malformed
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


# What a rule raises when a document's fields have the wrong types.
_UNREADABLE = (AttributeError, TypeError, ValueError, KeyError)


def ignored_rules(doc: Document) -> set[str]:
    try:
        texts = [annotations_of(doc.manifest).get(c.LINT_IGNORE, "")]
        view = pod_view(doc)
    except _UNREADABLE:
        return set()  # annotations of the wrong type: malformed-object says so
    if view is not None:
        texts.append(view.annotations.get(c.LINT_IGNORE, ""))
    return {part.strip() for text in texts for part in text.split(",") if part.strip()}


def _readable(documents: list[Document]) -> tuple[list[Document], list[Hit]]:
    """Documents the rules can read, and a malformed-object hit for each one they cannot."""
    good, bad = [], []
    for doc in documents:
        shape = malformed.problems(doc)
        if not shape:
            try:
                LintContext.build([doc])
            except _UNREADABLE as error:
                shape = [("", f"cannot be read ({type(error).__name__}: {error})")]
        if shape:
            bad += [Hit(doc, f, f"{what}: the API server rejects this object")
                    for f, what in shape]  # fmt: skip
        else:
            good.append(doc)
    return good, bad


def _run(rule: Rule, documents: list[Document]) -> tuple[list[Hit], list[Hit]]:
    """The rule's hits, and malformed-object hits for documents it cannot read. A rule that
    trips over one document is re-run without it, so the others are still checked."""
    try:
        return list(rule.check(LintContext.build(documents))), []
    except _UNREADABLE:
        pass
    good, bad = [], []
    for doc in documents:
        try:
            list(rule.check(LintContext.build([doc])))
            good.append(doc)
        except _UNREADABLE as error:
            bad.append(Hit(doc, "", f"rule {rule.id} cannot read this object ({error})"))
    try:
        return list(rule.check(LintContext.build(good))), bad
    except _UNREADABLE as error:  # only a combination of documents trips it
        first = documents[0]
        return [], [*bad, Hit(first, "", f"rule {rule.id} cannot read these objects ({error})")]


def lint_documents(
    documents: Sequence[Document],
    rules: Iterable[Rule],
    ignore: Iterable[str] = (),
) -> LintResult:
    readable, unreadable = _readable(list(documents))
    skipped = set(ignore)
    findings: list[Finding] = []
    chosen = [rule for rule in rules if rule.id not in skipped]
    hits: list[tuple[Rule, Hit]] = []
    if malformed.MALFORMED_OBJECT.id not in skipped:
        hits += [(malformed.MALFORMED_OBJECT, hit) for hit in unreadable]
    for rule in chosen:
        if rule.id == malformed.MALFORMED_OBJECT.id:
            continue  # reported above, from every document
        found, broken = _run(rule, readable)
        hits += [(rule, hit) for hit in found]
        if malformed.MALFORMED_OBJECT.id not in skipped:
            hits += [(malformed.MALFORMED_OBJECT, hit) for hit in broken]
    for rule, hit in hits:
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
