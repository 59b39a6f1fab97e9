"""The `Cluster` file `podserve simulate` plays manifests on (docs/simulate.md documents each
field; `schemas/cluster.schema.json` is generated from the descriptions here).

The keys of a node pool are a contract: `name`, `count`, `min`, `max`, `labels`, `taints`,
`allocatable`, `pricePerHourUsd`, `spot`, `provisioningSeconds`, `imagePullSeconds`,
`reclaimNoticeSeconds` work as written; keys may be added, never renamed."""

from __future__ import annotations

from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from podserve.config.service_base import quantity_value
from podserve.core.errors import InvalidInput

CLUSTER_API_VERSION = "podserve.dev/v1alpha1"


class _Key(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


def _quantities(values: dict[str, str | int | float]) -> dict[str, str | int | float]:
    for name, value in values.items():
        try:
            quantity_value(str(value))
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from exc
    return values


class Taint(_Key):
    key: str = Field(min_length=1, description="Taint key, e.g. nvidia.com/gpu.")
    value: str = Field("", description="Taint value (may be empty).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        description="NoSchedule and NoExecute keep untolerating pods off the node."
    )


class NodePool(_Key):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description="Pool name.")
    count: int = Field(ge=0, le=10000, description="Nodes at the start.")
    min: int | None = Field(
        None, ge=0, description="Cluster-autoscaler lower bound (default: count, no scale-down)."
    )
    max: int | None = Field(
        None, ge=0, description="Cluster-autoscaler upper bound (default: count, no scale-up)."
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Node labels (kubernetes.io/hostname and the pool label are added).",
    )
    taints: list[Taint] = Field(default_factory=list, description="Node taints.")
    allocatable: dict[str, str | int | float] = Field(
        description="Allocatable per node: cpu, memory, nvidia.com/gpu, MIG resources "
        "(nvidia.com/mig-<profile>), any extended resource; pods defaults to 110."
    )
    price_per_hour_usd: float = Field(0.0, ge=0, description="Price of one node per hour.")
    spot: bool = Field(False, description="Spot/preemptible capacity (can be reclaimed).")
    provisioning_seconds: float = Field(
        300, ge=0, description="From the autoscaler's request to a Ready, schedulable node."
    )
    image_pull_seconds: float = Field(
        60, ge=0, description="Pulling the server image on a node that does not have it."
    )
    reclaim_notice_seconds: float = Field(
        30, ge=0, description="Spot reclaim notice: from the notice to the node's removal."
    )
    pod_shutdown_seconds: float | None = Field(
        None,
        ge=0,
        description="The kubelet's graceful-shutdown share of the notice for ordinary pods "
        "(GKE: 15 of 30 s); default: the whole notice.",
    )
    model_fetch_gbps: float = Field(
        10.0, gt=0, description="Download bandwidth for model weights, in Gbit/s."
    )
    zones: list[str] = Field(
        default_factory=list,
        description="Zones the pool's nodes are spread over, round robin "
        "(topology.kubernetes.io/zone); default: the labels' zone or none.",
    )

    _check_allocatable = field_validator("allocatable")(_quantities)

    @model_validator(mode="after")
    def _bounds(self) -> NodePool:
        low = self.count if self.min is None else self.min
        high = self.count if self.max is None else self.max
        if not low <= self.count <= high:
            raise ValueError(
                f"pool {self.name}: need min <= count <= max, got {low}/{self.count}/{high}"
            )
        return self

    @property
    def min_nodes(self) -> int:
        return self.count if self.min is None else self.min

    @property
    def max_nodes(self) -> int:
        return self.count if self.max is None else self.max


class TenantPods(_Key):
    name: str = Field(min_length=1, description="Name prefix of these pods.")
    count: int = Field(1, ge=1, description="How many such pods run.")
    node_pool: str | None = Field(None, description="Pool they run in (default: any).")
    requests: dict[str, str | int | float] = Field(
        default_factory=dict, description="Resource requests of each pod."
    )
    priority: int = Field(0, description="Pod priority (lower ones can be preempted).")

    _check_requests = field_validator("requests")(_quantities)


class Autoscaler(_Key):
    """Cluster Autoscaler flags (kubernetes/autoscaler cluster-autoscaler/FAQ.md)."""

    scan_interval_seconds: float = Field(10, gt=0, description="--scan-interval.")
    scale_down_unneeded_seconds: float = Field(600, ge=0, description="--scale-down-unneeded-time.")
    scale_down_delay_after_add_seconds: float = Field(
        600, ge=0, description="--scale-down-delay-after-add."
    )
    scale_down_utilization_threshold: float = Field(
        0.5, ge=0, le=1, description="--scale-down-(gpu-)utilization-threshold."
    )
    expander: Literal["least-waste", "price"] = Field("least-waste", description="--expander.")


class ClusterSpec(_Key):
    node_pools: list[NodePool] = Field(min_length=1, description="Node pools.")
    pods: list[TenantPods] = Field(
        default_factory=list, description="Pods already running (other tenants)."
    )
    autoscaler: Autoscaler = Field(
        default_factory=Autoscaler, description="Cluster-autoscaler settings."
    )
    extended_resource_toleration: bool = Field(
        True,
        description="The ExtendedResourceToleration admission plugin is on (GKE, EKS, AKS): "
        "a pod requesting resource R tolerates NoSchedule taints keyed R.",
    )

    @model_validator(mode="after")
    def _unique(self) -> ClusterSpec:
        names = [p.name for p in self.node_pools]
        if len(set(names)) != len(names):
            raise ValueError("node pool names must be unique")
        known = set(names)
        for tenant in self.pods:
            if tenant.node_pool is not None and tenant.node_pool not in known:
                raise ValueError(f"pods {tenant.name}: unknown nodePool {tenant.node_pool}")
        return self


class ClusterMetadata(_Key):
    name: str = Field(min_length=1, description="Cluster name.")


class Cluster(_Key):
    api_version: Literal["podserve.dev/v1alpha1"] = Field(
        alias="apiVersion", description="Always podserve.dev/v1alpha1."
    )
    kind: Literal["Cluster"] = Field(description="Always Cluster.")
    metadata: ClusterMetadata = Field(description="Name.")
    spec: ClusterSpec = Field(description="Node pools, running pods, autoscaler.")


def load_cluster(text: str, source: str = "<cluster>") -> Cluster:
    """Parse a Cluster YAML document; errors name the source and each bad field."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{source} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise InvalidInput(f"{source} must be a YAML mapping (a Cluster)")
    try:
        return Cluster.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(cluster)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise InvalidInput(f"{source}: {problems}") from exc


def cluster_json_schema() -> dict[str, Any]:
    """JSON Schema for editors, keyed as users write the YAML."""
    schema = Cluster.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://podserve.dev/schemas/cluster.schema.json"
    return schema
