"""Suppressions with their reasons, for checkov and for `podserve lint`.

checkov's own suppression annotations (`checkov.io/skipN: <check>=<reason>`,
bridgecrewio/checkov docs/2.Basics/Suppressing and Skipping Policies.md), each with the
reason the check does not apply, so a scan of the rendered output lists every skip with
its why and fails on anything else (docs/kubernetes.md, "checkov")."""

from __future__ import annotations

from podserve.config.model_service import ModelService
from podserve.kube import conventions as c

OWNER_STEP = (
    "CHOWN is the only capability, added to the root cache-owner init step: the kubelet "
    "creates a hostPath directory root-owned and fsGroup does not apply to hostPath"
)
FETCH_ENV = (
    "podserve fetch reads HF_TOKEN / AWS_* from its environment as huggingface_hub and "
    "boto3 do; only the fetch init container gets them, never the server"
)


def checkov_skips(reasons: dict[str, str]) -> dict[str, str]:
    return {
        f"checkov.io/skip{index}": f"{check}={reason}"
        for index, (check, reason) in enumerate(sorted(reasons.items()), start=1)
    }


def fetch_lint_ignores(service: ModelService) -> dict[str, str]:
    """`podserve lint` ignores the spec declares with a reason: a public model or an EKS
    Pod Identity association leave no credential in the manifest (lint's
    fetch-without-credentials)."""
    spec = service.spec
    creds = spec.credentials
    reason = None
    if spec.model.public and (spec.canary is None or spec.canary.model.public):
        reason = "model.public in the ModelService: the source needs no credentials"
    elif creds is not None and creds.eks_pod_identity:
        reason = "credentials.eksPodIdentity: an EKS Pod Identity association holds the role"
    if reason is None:
        return {}
    return {c.LINT_IGNORE: "fetch-without-credentials", c.LINT_IGNORE_REASON: reason}


def fetch_pod_reasons(service: ModelService) -> dict[str, str]:
    """The skips every pod that runs the fetch steps needs."""
    spec = service.spec
    reasons = {}
    if spec.cache.kind == "hostPath":
        reasons["CKV_K8S_25"] = OWNER_STEP
    creds = spec.credentials
    if creds is not None and (creds.secret or creds.env):
        reasons["CKV_K8S_35"] = FETCH_ENV
    return reasons
