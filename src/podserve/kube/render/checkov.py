"""checkov's own suppression annotations (`checkov.io/skipN: <check>=<reason>`,
bridgecrewio/checkov docs/2.Basics/Suppressing and Skipping Policies.md), each with the
reason the check does not apply, so a scan of the rendered output lists every skip with
its why and fails on anything else (docs/kubernetes.md, "checkov")."""

from __future__ import annotations

from podserve.config.model_service import ModelService

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
