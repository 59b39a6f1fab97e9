"""`podserve lint`: model-serving pitfalls in any Kubernetes manifests."""

from podserve.kube.lint.engine import LintResult, lint_documents
from podserve.kube.lint.model import Finding, Rule
from podserve.kube.lint.rules import ALL_RULES, rule_by_id

__all__ = ["ALL_RULES", "Finding", "LintResult", "Rule", "lint_documents", "rule_by_id"]
