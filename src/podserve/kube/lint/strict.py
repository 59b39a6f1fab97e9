"""`podserve lint --strict`: before the lint rules, what the cluster itself would say. Every
object is validated against the OpenAPI schemas of several Kubernetes minors (custom
resources against their CRD), then the API server's cross-field checks and the CRDs' CEL
rules run (podserve.kube.apiserver). Each problem becomes a finding of one of three
pseudo-rules, so text, JSON and SARIF output and the ignore mechanisms treat them alike."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from podserve.kube.apiserver import FieldError, check_manifest, check_service_ports
from podserve.kube.apiserver.cel import evaluate_cel
from podserve.kube.lint.engine import ignored_rules
from podserve.kube.lint.model import Finding, Rule
from podserve.kube.lint.pods import object_label
from podserve.kube.types import Document, Severity
from podserve.kube.validation import KUBERNETES_VERSIONS, CrdCatalog, validate_manifests

SCHEMA = Rule(
    id="schema",
    severity=Severity.ERROR,
    title="Object does not validate against its schema",
    why="The API server rejects an object whose fields do not match the OpenAPI schema of "
    "its kind (built-in kinds per Kubernetes minor; custom resources per their CRD, where "
    "unknown fields would be silently pruned).",
    fix="Fix the field the message names; check the apiVersion against the cluster's minor.",
    check=lambda ctx: (),
)
API_SERVER = Rule(
    id="api-server",
    severity=Severity.ERROR,
    title="The API server (or an admission webhook, or the kubelet) would refuse this",
    why="Cross-field validation the schema cannot express runs in the API server "
    "(pkg/apis/*/validation/validation.go), in admission webhooks such as KEDA's, and in "
    "the kubelet: the message is theirs, word for word.",
    fix="Fix the field the message names.",
    check=lambda ctx: (),
)
CRD_CEL = Rule(
    id="crd-cel",
    severity=Severity.ERROR,
    title="A CRD's CEL validation rule fails",
    why="CustomResourceDefinitions carry CEL rules (x-kubernetes-validations) that the API "
    "server evaluates on every create and update, after defaulting; a failing rule rejects "
    "the object with the rule's message.",
    fix="Fix the field the message names, as the rule's message says.",
    check=lambda ctx: (),
)
STRICT_RULES: tuple[Rule, ...] = (SCHEMA, API_SERVER, CRD_CEL)


def _schema(doc: Document, catalog: CrdCatalog, versions: Sequence[str]) -> Iterator[Finding]:
    by_problem: dict[tuple[str, str], list[str]] = {}
    for problem in validate_manifests([doc.manifest], catalog, versions):
        by_problem.setdefault((problem.path, problem.message), []).append(problem.schema)
    for (path, message), schemas in by_problem.items():
        yield Finding(
            rule_id=SCHEMA.id,
            severity=Severity.ERROR,
            object=object_label(doc.manifest),
            field=path or "(root)",
            message=f"{message} ({', '.join(schemas)})",
            fix=SCHEMA.fix,
            source=doc.source,
        )


def strict_findings(
    documents: Iterable[Document],
    catalog: CrdCatalog,
    versions: Sequence[str] = KUBERNETES_VERSIONS,
    ignore: Iterable[str] = (),
) -> list[Finding]:
    """Schema, API-server and CEL findings, less those `--ignore`d or silenced by the
    object's `podserve.dev/lint-ignore` annotation."""
    skipped = set(ignore)
    findings: list[Finding] = []
    listed = list(documents)
    by_manifest = {id(doc.manifest): doc for doc in listed}
    for manifest, problem in check_service_ports([doc.manifest for doc in listed]):
        doc = by_manifest[id(manifest)]
        if API_SERVER.id not in skipped | ignored_rules(doc):
            findings.append(_finding(API_SERVER, doc, problem))
    for doc in listed:
        silenced = skipped | ignored_rules(doc)
        if SCHEMA.id not in silenced:
            findings += _schema(doc, catalog, versions)
        for rule, problems in (
            (API_SERVER, check_manifest(doc.manifest)),
            (CRD_CEL, evaluate_cel(doc.manifest, catalog).errors),
        ):
            if rule.id in silenced:
                continue
            findings += [_finding(rule, doc, problem) for problem in problems]
    return findings


def _finding(rule: Rule, doc: Document, problem: FieldError) -> Finding:
    return Finding(
        rule_id=rule.id,
        severity=problem.severity,
        object=object_label(doc.manifest),
        field=problem.path or "(root)",
        message=problem.body,
        fix=f"{rule.fix} Source: {problem.source}",
        source=doc.source,
    )
