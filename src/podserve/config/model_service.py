"""The `ModelService` spec: one YAML document that says what to serve and how, from which
`podserve render` derives every Kubernetes object (docs/modelservice.md documents each field;
it and `schemas/modelservice.schema.json` are generated from the descriptions here).

The spec holds what a user knows (observed load time, longest request, whether a spare GPU
exists); the renderer computes everything that follows from it (probe budgets, grace period,
rolling strategy), so the numbers can never disagree with each other.
"""

from __future__ import annotations

from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    ValidationError,
    model_validator,
)

from podserve.config.service_access import Credentials, SecretKey, bad_env_names
from podserve.config.service_async import AsyncConsumer
from podserve.config.service_base import _DNS_SUBDOMAIN, _Spec, quantity_value
from podserve.config.service_gpu import Gpu, gpu_problem
from podserve.config.service_ops import (
    Activation,
    ActiveWindow,
    Autoscaling,
    BatchJob,
    Canary,
    ColdStart,
    Evaluation,
    GatewayRef,
    InferencePoolSpec,
    Monitoring,
    Quota,
    ScalingEngine,
    ScalingMetric,
    Timing,
)
from podserve.config.service_pod import (
    Architecture,
    Cache,
    Capacity,
    CapacityType,
    Disruption,
    Image,
    Metadata,
    ModelSource,
    Replicas,
    Resources,
    Rollout,
    Serving,
    Spread,
)
from podserve.core.errors import InvalidInput

API_VERSION = "podserve.dev/v1alpha1"
KIND = "ModelService"


class ModelServiceSpec(_Spec):
    model: ModelSource = Field(description="The model to serve.")
    image: Image = Field(default_factory=Image, description="The server image.")
    workload: Literal["Deployment", "StatefulSet"] = Field(
        "Deployment",
        description="StatefulSet for stable identities (sharded models, per-replica caches).",
    )
    replicas: Replicas = Field(default_factory=Replicas, description="Replica bounds.")
    gpu: Gpu = Field(default_factory=Gpu, description="Accelerators.")
    resources: Resources = Field(default_factory=Resources, description="CPU, memory, shm.")
    serving: Serving = Field(default_factory=Serving, description="Admission limits.")
    autoscaling: Autoscaling | None = Field(
        None, description="Autoscaler; required when replicas.min != replicas.max."
    )
    rollout: Rollout = Field(default_factory=Rollout, description="Update strategy.")
    disruption: Disruption = Field(default_factory=Disruption, description="PDB.")
    spread: Spread = Field(default_factory=Spread, description="Placement across failures.")
    cache: Cache = Field(default_factory=Cache, description="Model cache volume.")
    canary: Canary | None = Field(None, description="A second model taking a share of traffic.")
    gateway: GatewayRef | None = Field(None, description="Gateway API HTTPRoute.")
    inference_pool: InferencePoolSpec | None = Field(
        None, description="Gateway API Inference Extension InferencePool (needs gateway)."
    )
    batch: list[BatchJob] = Field(default_factory=list, description="Batch inference jobs.")
    quota: Quota | None = Field(None, description="Namespace ResourceQuota and LimitRange.")
    capacity: Capacity = Field(default_factory=Capacity, description="On-demand vs spot.")
    cold_start: ColdStart = Field(default_factory=ColdStart, description="Cold-start helpers.")
    monitoring: Monitoring = Field(default_factory=Monitoring, description="Prometheus.")
    evaluation: Evaluation | None = Field(
        None,
        alias="eval",
        description="Golden-set evaluation on a schedule: a CronJob running `podserve eval` "
        "against the Service, and alerts on its pass ratio (docs/eval.md).",
    )
    timing: Timing = Field(default_factory=Timing, description="Termination timing.")
    async_: AsyncConsumer | None = Field(
        None,
        alias="async",
        description="Asynchronous inference: `podserve consume` from a Redis stream, scaled "
        "from zero on its backlog by KEDA (docs/async.md).",
    )
    network_policy: bool = Field(
        True, description="Render a NetworkPolicy admitting only the serving ports."
    )
    service_account_token: bool = Field(
        False, description="Mount a service-account token (only if the pod calls the API)."
    )
    credentials: Credentials | None = Field(
        None,
        description="Credentials for the weight fetch: a Secret for its environment and/or "
        "workload identity on the ServiceAccount (docs/kubernetes.md).",
    )
    priority_class_name: str | None = Field(
        None,
        pattern=_DNS_SUBDOMAIN,
        description="Existing PriorityClass of the serving pods. Default: render "
        "`<namespace>-<name>-serving` (value 1000), so serving preempts batch and dev pods "
        "(priority 0) and GPU headroom pods (-10), never the reverse.",
    )

    @model_validator(mode="after")
    def _coherent(self) -> ModelServiceSpec:
        self._check_placement()
        self._check_scaling()
        self._check_objects()
        return self

    def _check_placement(self) -> None:
        provider = self.capacity.provider
        problem = gpu_problem(self.gpu, provider)
        if problem is not None:
            raise ValueError(problem)
        if provider == "generic":
            if self.capacity.serving.value == "spot":
                raise ValueError("capacity.serving spot needs a provider that labels spot nodes")
            if any(job.spot for job in self.batch):
                raise ValueError(
                    "batch spot: true needs a provider that labels spot nodes (or spot: false)"
                )
        if self.credentials is not None:
            bad = bad_env_names(self.credentials)
            if bad:
                raise ValueError(
                    f"credentials.env {', '.join(bad)}: podserve fetch reads only HF_TOKEN, "
                    "HF_ENDPOINT, AWS_* and PODSERVE_S3_ENDPOINT_URL"
                )
        cap = self.cache.max_size
        size = self.model.size_gi
        if (
            cap is not None
            and size is not None
            and quantity_value(cap) < quantity_value(f"{size}Gi")
        ):
            raise ValueError("cache.maxSize is below model.sizeGi: the model cannot fit")

    def _check_scaling(self) -> None:
        scaling, bounds = self.autoscaling, self.replicas
        if scaling is None and bounds.min != bounds.max:
            raise ValueError("replicas.min != replicas.max needs an autoscaling section")
        if scaling is not None and scaling.active_hours:
            if scaling.engine is not ScalingEngine.KEDA:
                raise ValueError("autoscaling.activeHours needs engine keda (a cron trigger)")
            if bounds.min == 0 or scaling.scale_to_zero:
                raise ValueError(
                    "autoscaling.activeHours scales to zero outside the windows; replicas.min "
                    "is the floor inside them and must be at least 1 (scaleToZero stays false)"
                )
        if scaling is not None and scaling.fallback_replicas is not None:
            if scaling.metric is ScalingMetric.CPU:
                raise ValueError("KEDA fallback does not apply to cpu triggers")
            if scaling.fallback_replicas > bounds.max:
                raise ValueError("autoscaling.fallbackReplicas is above replicas.max")
        if scaling is not None:
            up = scaling.scale_up_stabilization_seconds
            down = scaling.scale_down_stabilization_seconds
            if up is not None and down is not None and up >= down:
                raise ValueError(
                    "autoscaling.scaleUpStabilizationSeconds must be below the scale-down "
                    "window, or the service sheds capacity faster than it adds it"
                )
            if scaling.scale_to_zero != (bounds.min == 0):
                raise ValueError("autoscaling.scaleToZero and replicas.min: 0 go together")
            if scaling.scale_to_zero and scaling.engine is not ScalingEngine.KEDA:
                raise ValueError(
                    "scale to zero needs engine keda (HPAScaleToZero is alpha, off by default)"
                )
            if scaling.scale_to_zero and scaling.activation is None:
                raise ValueError(
                    "scaleToZero needs autoscaling.activation: at zero replicas no "
                    "pod exports the metric that would wake the service"
                )
            if scaling.metric is ScalingMetric.TTFT_P95 and not self.model.generative:
                raise ValueError("metric ttft-p95 needs model.generative: true")
            if scaling.metric is ScalingMetric.CPU and self.gpu.count > 0 and not scaling.force_cpu:
                raise ValueError(
                    "CPU utilization does not track a GPU model's load; use "
                    "queue-depth, or set autoscaling.forceCpu: true"
                )
            window = scaling.scale_down_stabilization_seconds
            if window is not None and window <= self.model.load_seconds:
                raise ValueError(
                    "autoscaling.scaleDownStabilizationSeconds must exceed "
                    "model.loadSeconds, or a replica is removed before a new one "
                    "could replace it"
                )
        elif bounds.min == 0:
            raise ValueError("replicas.min 0 needs autoscaling with scaleToZero")

    def _check_objects(self) -> None:
        bounds = self.replicas
        given = self.disruption.min_available
        if given is not None and bounds.min > 0 and given >= bounds.min:
            raise ValueError(
                "disruption.minAvailable must be below replicas.min, or no node "
                "drain can ever evict a pod"
            )
        if self.inference_pool is not None and self.gateway is None:
            raise ValueError("inferencePool needs a gateway to route to it")
        if self.canary is not None and self.gateway is None:
            raise ValueError("canary needs a gateway: the HTTPRoute carries the weights")
        if self.cache.kind == "pvc" and self.workload == "Deployment":
            if self.cache.claim_name is None:
                raise ValueError("cache.kind pvc on a Deployment needs cache.claimName")
            if not self.cache.read_write_many:
                raise ValueError(
                    "a ReadWriteOnce claim cannot be shared by replicas or a surge "
                    "pod (Multi-Attach); use readWriteMany, hostPath, or a "
                    "StatefulSet with one claim per replica"
                )
        if (
            self.cache.kind == "pvc"
            and self.workload == "StatefulSet"
            and (self.cache.size is None and self.model.size_gi is None)
        ):
            raise ValueError("per-replica cache claims need cache.size or model.sizeGi")
        if self.cold_start.headroom_pods and self.gpu.count == 0:
            raise ValueError("coldStart.headroomPods holds GPUs; the model uses none")
        pool = self.inference_pool
        if (
            pool is not None
            and self.canary is not None
            and pool.endpoint_picker is not None
            and pool.endpoint_picker == pool.canary_endpoint_picker
        ):
            raise ValueError(
                "inferencePool: stable and canary pools share one endpoint picker, but an "
                "EPP serves one pool (--pool-name): the canary's share never reaches it"
            )


class ModelService(_Spec):
    api_version: Literal["podserve.dev/v1alpha1"] = Field(
        alias="apiVersion", description="Always podserve.dev/v1alpha1."
    )
    kind: Literal["ModelService"] = Field(description="Always ModelService.")
    metadata: Metadata = Field(description="Name, namespace, labels.")
    spec: ModelServiceSpec = Field(description="What to serve and how.")

    def to_document(self) -> dict[str, Any]:
        """The canonical document: every field, camelCase, defaults filled in."""
        return self.model_dump(mode="json", by_alias=True)


def load_model_service(text: str, source: str = "<spec>") -> ModelService:
    """Parse one ModelService YAML document; errors name the source and each bad field."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{source} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise InvalidInput(f"{source} must be a YAML mapping (a ModelService)")
    try:
        return ModelService.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(spec)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise InvalidInput(f"{source}: {problems}") from exc


def model_service_json_schema() -> dict[str, Any]:
    """JSON Schema for editors (yaml-language-server), keyed as users write the YAML."""
    schema = ModelService.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://podserve.dev/schemas/modelservice.schema.json"
    return schema


__all__ = [
    "API_VERSION",
    "KIND",
    "Activation",
    "ActiveWindow",
    "Architecture",
    "Autoscaling",
    "BatchJob",
    "Cache",
    "Canary",
    "Capacity",
    "CapacityType",
    "ColdStart",
    "Credentials",
    "Disruption",
    "Evaluation",
    "GatewayRef",
    "Gpu",
    "Image",
    "InferencePoolSpec",
    "Metadata",
    "ModelService",
    "ModelServiceSpec",
    "ModelSource",
    "Monitoring",
    "Quota",
    "Replicas",
    "Resources",
    "Rollout",
    "ScalingEngine",
    "ScalingMetric",
    "SecretKey",
    "Serving",
    "Spread",
    "Timing",
    "load_model_service",
    "model_service_json_schema",
    "quantity_value",
]
