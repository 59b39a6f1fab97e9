"""hostpath-cache-under-pod-security on rendered examples: a hostPath cache is refused in
a namespace enforcing baseline or restricted (with the owner step too under restricted),
and a claim-backed cache or a privileged / warn-only namespace passes."""

from __future__ import annotations

import pytest

from podserve.kube.lint import ALL_RULES, lint_documents
from podserve.kube.render import render
from podserve.kube.yamlio import dump_all, parse_documents
from tests.kube.paths import EXAMPLES, load_example

DEV = next(p for p in EXAMPLES if p.name == "dev-gpu-office-hours.yaml")  # hostPath cache
MIG = next(p for p in EXAMPLES if p.name == "mig-statefulset.yaml")  # a claim per replica
RULE = "hostpath-cache-under-pod-security"


def namespace(name: str, labels: str) -> str:
    return f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}, labels: {labels}}}\n"


def hits(example: str, ns: str) -> list[tuple[str, str]]:
    service = load_example(next(p for p in EXAMPLES if p.name == example))
    text = namespace(service.metadata.namespace, ns) + "---\n"
    text += dump_all(render(service).manifests)
    findings = lint_documents(parse_documents(text, "t.yaml"), ALL_RULES).findings
    return [(f.object, f.message) for f in findings if f.rule_id == RULE]


def test_restricted_refuses_the_cache_and_the_owner_step() -> None:
    found = hits(DEV.name, "{pod-security.kubernetes.io/enforce: restricted}")
    assert [obj for obj, _ in found] == ["Deployment/dev-llm/dev-chat"]
    message = dict(found)["Deployment/dev-llm/dev-chat"]
    assert message == (
        'namespace dev-llm enforces Pod Security "restricted", which refuses hostPath volumes '
        '(volume "cache", /var/cache/podserve/dev-llm): the workload is accepted and its pods '
        "are not; restricted also refuses the root, CHOWN init step cache-owner "
        "(runAsNonRoot, capabilities)"
    )


def test_baseline_refuses_the_hostpath_only() -> None:
    found = dict(hits(DEV.name, "{pod-security.kubernetes.io/enforce: baseline}"))
    message = found["Deployment/dev-llm/dev-chat"]
    assert 'enforces Pod Security "baseline"' in message
    assert "owner" not in message  # baseline allows root and CHOWN


@pytest.mark.parametrize(
    "labels",
    [
        "{pod-security.kubernetes.io/enforce: privileged}",
        "{pod-security.kubernetes.io/warn: restricted, pod-security.kubernetes.io/audit: baseline}",
        "{}",
    ],
)
def test_levels_that_admit_hostpath(labels: str) -> None:
    assert hits(DEV.name, labels) == []


def test_a_claim_backed_cache_passes_restricted() -> None:
    assert hits(MIG.name, "{pod-security.kubernetes.io/enforce: restricted}") == []


def test_only_the_namespace_that_enforces() -> None:
    service = load_example(DEV)
    text = namespace("other", "{pod-security.kubernetes.io/enforce: restricted}") + "---\n"
    text += dump_all(render(service).manifests)
    findings = lint_documents(parse_documents(text, "t.yaml"), ALL_RULES).findings
    assert not [f for f in findings if f.rule_id == RULE]


def test_every_pod_mounting_the_node_cache_is_named() -> None:
    found = hits("llm-gpu-keda-canary.yaml", "{pod-security.kubernetes.io/enforce: baseline}")
    kinds = sorted({obj.split("/")[0] for obj, _ in found})
    # Stable and canary Deployments, the batch CronJob and the pre-pull DaemonSet each
    # mount the node's cache: each of their pods would be refused.
    assert kinds == ["CronJob", "DaemonSet", "Deployment"]
    assert len([obj for obj, _ in found if obj.startswith("Deployment/")]) == 2
