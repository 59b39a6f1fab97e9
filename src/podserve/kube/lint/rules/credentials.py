"""Credentials for the weight fetch: a gated Hugging Face repository or a private bucket
answers 401/403 to an anonymous fetch, the init container exits non-zero, and the pod
crash-loops in Init forever.

How a pod gets credentials, by source: Hugging Face reads `HF_TOKEN` (huggingface_hub
docs, environment variables); S3 through the AWS SDK's default chain: `AWS_*` variables,
IRSA (ServiceAccount annotation `eks.amazonaws.com/role-arn`, aws/amazon-eks-pod-identity-
webhook README) or EKS Pod Identity (no trace in the manifest: silence the rule with a
reason); GCS through Workload Identity (`iam.gke.io/gcp-service-account` on the
ServiceAccount) or `GOOGLE_APPLICATION_CREDENTIALS`; Azure through Workload Identity (pod
label `azure.workload.identity/use: "true"` and the ServiceAccount's
`azure.workload.identity/client-id`) or `AZURE_*`; KServe links credentials through the
predictor's ServiceAccount (kserve docs "Storage: credentials")."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import Container, PodView
from podserve.kube.lint.signals import args_of, env_names, service_account
from podserve.kube.types import Severity

_URI = re.compile(r"^(hf|s3|gs|gcs|az|abfss?|wasbs?)://")
# Azure Blob as KServe's storage initializer and `podserve fetch` take it: an https URL on
# the account's blob endpoint (kserve_storage.py `_AZURE_BLOB_RE`; storage/uri.py).
_AZURE_BLOB = re.compile(
    r"^https://[a-z0-9]{3,24}\.(blob\.core\.windows\.net|z\d+\.blob\.storage\.azure\.net)/"
)
_ENV = {
    "hf": {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN"},
    "s3": {"AWS_ACCESS_KEY_ID", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_PROFILE"},
    "gs": {"GOOGLE_APPLICATION_CREDENTIALS"},
    # storage/fetchers/azure_blob.py's order; AZURE_STORAGE_ACCESS_KEY is KServe's name.
    "az": {
        "AZURE_CLIENT_ID",
        "AZURE_FEDERATED_TOKEN_FILE",
        "AZURE_STORAGE_KEY",
        "AZURE_STORAGE_ACCESS_KEY",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_CONNECTION_STRING",
    },
}
_SA_ANNOTATIONS = {
    "s3": "eks.amazonaws.com/role-arn",
    "gs": "iam.gke.io/gcp-service-account",
    "az": "azure.workload.identity/client-id",
}


def _is_source(arg: str) -> bool:
    return bool(_URI.match(arg) or _AZURE_BLOB.match(arg))


def _family(uri: str) -> str:
    if _AZURE_BLOB.match(uri):
        return "az"
    scheme = uri.split("://", 1)[0]
    return {"gcs": "gs", "abfs": "az", "abfss": "az", "wasb": "az", "wasbs": "az"}.get(
        scheme, scheme
    )


def _env_from_secret(ctr: Container) -> bool:
    return any(
        isinstance(item, Mapping) and item.get("secretRef")
        for item in ctr.spec.get("envFrom") or []
    )


def _credentialed(ctx: LintContext, pod: PodView, ctr: Container, family: str) -> bool:
    if env_names(ctr) & _ENV.get(family, set()) or _env_from_secret(ctr):
        return True
    if pod.kind == "InferenceService" and pod.pod.get("serviceAccountName"):
        return True
    account = service_account(ctx, pod)
    annotations = (
        ((account.manifest.get("metadata") or {}).get("annotations") or {}) if account else {}
    )
    key = _SA_ANNOTATIONS.get(family)
    if key is None or key not in annotations:
        return False
    if family == "az":  # the webhook mutates only pods that carry this label
        return pod.labels.get("azure.workload.identity/use") == "true"
    return True


def _fetches(pod: PodView) -> Iterator[tuple[Container, str]]:
    containers = pod.containers(init=True)
    for ctr in containers:
        for arg in args_of(ctr):
            if _is_source(arg):
                yield ctr, arg
    if pod.kind == "InferenceService" and containers:
        for uri in pod.extra_models:
            if _is_source(uri):
                yield containers[0], uri


def _without(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        for ctr, uri in _fetches(pod):
            family = _family(uri)
            if not _credentialed(ctx, pod, ctr, family):
                yield Hit(
                    pod.document,
                    f"{ctr.path}.env",
                    f"fetches {uri} with no credentials: a gated or private source answers "
                    "401/403 and the pod crash-loops",
                )


FETCH_WITHOUT_CREDENTIALS = Rule(
    id="fetch-without-credentials",
    severity=Severity.WARNING,
    title="Weight fetch from a gated or private source without credentials",
    why="Gated Hugging Face repositories (meta-llama's Llama, google's Gemma) and private "
    "buckets refuse anonymous downloads with 401/403. The fetch init container then fails "
    "on every start and the pod sits in Init:CrashLoopBackOff, with nothing in the "
    "manifest saying why. The manifest cannot tell a public repository from a gated one, so "
    "a public model silences this rule with a reason.",
    fix="Give the fetch its credentials: a Secret with HF_TOKEN or AWS_* as env/envFrom "
    "(spec fetch credentials), or workload identity on the ServiceAccount (IRSA "
    "eks.amazonaws.com/role-arn, GKE iam.gke.io/gcp-service-account, Azure client-id plus "
    "the pod label azure.workload.identity/use). For a public model add "
    "`podserve.dev/lint-ignore: fetch-without-credentials` with a lint-ignore-reason.",
    check=_without,
)
