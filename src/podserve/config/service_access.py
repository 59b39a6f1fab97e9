"""The `credentials` section of a ModelService: what the weight fetch needs to reach a gated
`hf://` model or a private `s3://` bucket.

Two ways, as KServe links storage credentials to a service account
(kserve/kserve pkg/credentials/service_account_credentials.go):
- a Secret whose keys become the fetch's environment (`podserve fetch` reads `HF_TOKEN`
  like huggingface_hub and `AWS_*` like boto3), given to the fetch containers only;
- workload identity, as annotations on the pod's ServiceAccount: IRSA
  `eks.amazonaws.com/role-arn` (aws/amazon-eks-pod-identity-webhook README), GKE
  `iam.gke.io/gcp-service-account` (cloud.google.com/kubernetes-engine/docs/how-to/
  workload-identity), Azure `azure.workload.identity/client-id` plus the pod label
  `azure.workload.identity/use: "true"` (Azure/azure-workload-identity docs, "Service
  Account Labels and Annotations"). EKS Pod Identity needs nothing in the manifest.
"""

from __future__ import annotations

import re

from pydantic import Field

from podserve.config.service_base import _DNS_SUBDOMAIN, _Spec

# The variables the fetchers read (storage/fetchers/base.py: AWS_*, HF_ENDPOINT, HF_TOKEN).
FETCH_ENV = (
    r"^(HF_TOKEN|HF_ENDPOINT|AWS_[A-Z0-9_]+|PODSERVE_S3_ENDPOINT_URL"
    # storage/fetchers/azure_blob.py: the account's own secrets and a service principal.
    r"|AZURE_STORAGE_(CONNECTION_STRING|SAS_TOKEN|KEY|ACCESS_KEY)"
    r"|AZURE_(CLIENT_ID|TENANT_ID|CLIENT_SECRET)|PODSERVE_AZURE_BLOB_ENDPOINT"
    # storage/fetchers/gcs.py; a key file is a path, so it comes from gcpKeySecret instead.
    r"|PODSERVE_GCS_[A-Z_]+)$"
)
# Where gcpKeySecret's key file is mounted in the fetch containers (read-only).
GCP_KEY_DIR = "/var/run/secrets/podserve/gcp"
GCP_KEY_FILE = "key.json"


class SecretKey(_Spec):
    secret: str = Field(pattern=_DNS_SUBDOMAIN, description="Secret in the same namespace.")
    key: str = Field(pattern=r"^[-._a-zA-Z0-9]+$", description="Key in that Secret.")


class Credentials(_Spec):
    secret: str | None = Field(
        None,
        pattern=_DNS_SUBDOMAIN,
        description="Secret whose keys (`HF_TOKEN`, `AWS_ACCESS_KEY_ID`, "
        "`AWS_SECRET_ACCESS_KEY`, ...) become the fetch containers' environment (envFrom). "
        "The server container never sees them.",
    )
    env: dict[str, SecretKey] = Field(
        default_factory=dict,
        description="Single variables from Secret keys, e.g. `HF_TOKEN: {secret: hf, key: "
        "token}`; names are those `podserve fetch` reads (HF_TOKEN, HF_ENDPOINT, AWS_*, "
        "PODSERVE_S3_ENDPOINT_URL, AZURE_STORAGE_CONNECTION_STRING / _SAS_TOKEN / _KEY, "
        "AZURE_CLIENT_ID / _TENANT_ID / _CLIENT_SECRET, PODSERVE_GCS_*, "
        "PODSERVE_AZURE_BLOB_ENDPOINT).",
    )
    gcp_key_secret: SecretKey | None = Field(
        None,
        description="A Google service-account key file in a Secret, for gs:// outside GKE "
        "Workload Identity: mounted read-only into the fetch containers only, with "
        "GOOGLE_APPLICATION_CREDENTIALS pointing at it (google-auth's default chain). "
        "Prefer gcpServiceAccount on GKE: no long-lived key.",
    )
    aws_role_arn: str | None = Field(
        None,
        pattern=r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]+$",
        description="IRSA: IAM role for the ServiceAccount (`eks.amazonaws.com/role-arn`).",
    )
    gcp_service_account: str | None = Field(
        None,
        pattern=r"^[a-z][-a-z0-9]{4,28}[a-z0-9]@[a-z][-a-z0-9]+\.iam\.gserviceaccount\.com$",
        description="GKE Workload Identity: Google service account the Kubernetes one acts "
        "as (`iam.gke.io/gcp-service-account`); grant it roles/iam.workloadIdentityUser.",
    )
    azure_client_id: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
        description="Azure Workload Identity: client id of the managed identity "
        "(`azure.workload.identity/client-id`; pods get `azure.workload.identity/use`).",
    )

    eks_pod_identity: bool = Field(
        False,
        description="An EKS Pod Identity association gives the ServiceAccount an IAM role: "
        "nothing in the manifest shows it, so this tells `podserve lint` the fetch is "
        "credentialed.",
    )

    def service_account_annotations(self) -> dict[str, str]:
        result = {}
        if self.aws_role_arn:
            result["eks.amazonaws.com/role-arn"] = self.aws_role_arn
        if self.gcp_service_account:
            result["iam.gke.io/gcp-service-account"] = self.gcp_service_account
        if self.azure_client_id:
            result["azure.workload.identity/client-id"] = self.azure_client_id
        return result


def bad_env_names(credentials: Credentials) -> list[str]:
    return sorted(name for name in credentials.env if not re.match(FETCH_ENV, name))
