"""The `ModelService` spec: one YAML document that says what to serve and how, from which
`podserve render` derives every Kubernetes object (docs/modelservice.md documents each field;
it and `schemas/modelservice.schema.json` are generated from the descriptions here).

The spec holds what a user knows (observed load time, longest request, whether a spare GPU
exists); the renderer computes everything that follows from it (probe budgets, grace period,
rolling strategy), so the numbers can never disagree with each other.
"""

from __future__ import annotations

import re
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from podserve.core.errors import InvalidInput

API_VERSION = "podserve.dev/v1alpha1"
KIND = "ModelService"

# Kubernetes quantity syntax (k8s.io/apimachinery resource.Quantity), kept to the forms a
# person writes: a decimal number with an optional binary or decimal suffix.
_QUANTITY = re.compile(r"^(?P<num>[0-9]+(\.[0-9]+)?)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_FACTORS = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_DIGEST = r"^sha256:[0-9a-f]{64}$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"


def quantity_value(text: str) -> Decimal:
    """The numeric value of a quantity (`"64Gi"` → bytes, `"500m"` → 0.5)."""
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity such as 500m, 4, 16Gi")
    return Decimal(match["num"]) * _FACTORS[match["suffix"] or ""]


def _check_quantity(text: str) -> str:
    quantity_value(text)
    return text


Quantity = Annotated[str, AfterValidator(_check_quantity)]


class _Spec(BaseModel):
    """camelCase keys in YAML, like every Kubernetes object; unknown keys are errors."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        use_enum_values=False,
    )


class Metadata(_Spec):
    name: str = Field(
        max_length=40,
        pattern=_DNS_LABEL,
        description="Name of the service; every object is named from it (suffixes such as "
        "`-canary` are added, hence at most 40 characters).",
    )
    namespace: str = Field("default", pattern=_DNS_LABEL, description="Target namespace.")
    labels: dict[str, str] = Field(
        default_factory=dict, description="Extra labels put on every rendered object."
    )


class ModelSource(_Spec):
    name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$",
        description="Model name clients use (`/v2/models/{name}`); default: metadata.name.",
    )
    uri: str = Field(
        min_length=1,
        description="Where the weights live: `s3://`, `hf://org/name@rev`, `https://`, `file://`.",
    )
    digest: str = Field(
        pattern=_DIGEST,
        description="`sha256:<hex>` the fetcher verifies; a model is never served unpinned.",
    )
    runtime: str = Field(
        min_length=1,
        description="podserve runtime (`sklearn`, `onnx`, `torch`, `transformers`, ...).",
    )
    load_seconds: float = Field(
        gt=0,
        le=86400,
        description="Observed time from container start to /startup = 200 (the server logs and "
        "exports it). Sets the startup-probe budget (x 1.5) and the scale-down window.",
    )
    size_gi: float | None = Field(
        None, gt=0, description="Size of the weights in GiB; sizes a cache PVC."
    )
    generative: bool = Field(
        False,
        description="Token-generating model: enables TTFT alerts and the ttft-p95 metric.",
    )


class Image(_Spec):
    repository: str = Field("ghcr.io/podserve/podserve", description="Server image repository.")
    tag: str = Field(
        "0.1.0", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", description="Image tag."
    )
    digest: str | None = Field(
        None, pattern=_DIGEST, description="Pin the image by digest (recommended)."
    )
    pull_policy: Literal["IfNotPresent", "Always", "Never"] = Field(
        "IfNotPresent", description="imagePullPolicy."
    )

    @property
    def ref(self) -> str:
        base = f"{self.repository}:{self.tag}"
        return f"{base}@{self.digest}" if self.digest else base


class Replicas(_Spec):
    min: int = Field(1, ge=0, le=1000, description="Fewest replicas (0 = scale to zero, KEDA).")
    max: int = Field(1, ge=1, le=1000, description="Most replicas the autoscaler may create.")

    @model_validator(mode="after")
    def _ordered(self) -> Replicas:
        if self.min > self.max:
            raise ValueError(f"replicas.min {self.min} is above replicas.max {self.max}")
        return self


class Gpu(_Spec):
    count: int = Field(
        0, ge=0, le=16, description="Whole devices per pod (0: a CPU model). Request = limit."
    )
    resource: str = Field(
        "nvidia.com/gpu",
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9._]*[a-z0-9])?$",
        description="Extended resource name, e.g. `nvidia.com/gpu`, or a MIG profile such as "
        "`nvidia.com/mig-1g.10gb` (mixed strategy).",
    )
    product: str | None = Field(
        None,
        description="Value of the GPU product node label (GPU feature discovery), e.g. "
        "`NVIDIA-A100-SXM4-80GB`; pods are pinned to it.",
    )
    product_label: str = Field(
        "nvidia.com/gpu.product", description="Node label that carries the product."
    )
    present_label: str = Field(
        "nvidia.com/gpu.present",
        description="Node label (value `true`) that marks GPU nodes when no product is given.",
    )
    taint_key: str = Field(
        "nvidia.com/gpu", description="Key of the taint GPU nodes carry; pods tolerate it."
    )
    time_slicing: bool = Field(
        False,
        description="The device plugin shares each GPU by time-slicing: no memory isolation, so "
        "count must be 1 and pods land only on nodes labelled for it.",
    )

    @model_validator(mode="after")
    def _slices(self) -> Gpu:
        if self.time_slicing and self.count != 1:
            raise ValueError(
                "gpu.timeSlicing needs gpu.count 1: a pod asking for several "
                "slices gets no more compute, only more contention"
            )
        return self


class Resources(_Spec):
    cpu: Quantity = Field("2", description="CPU request.")
    cpu_limit: Quantity | None = Field(
        None, description="CPU limit, above the request (default: twice the request)."
    )
    memory: Quantity = Field(
        "8Gi",
        description="Host memory for the process (weights load through it). The memory "
        "request and limit are this plus `shm`, because /dev/shm counts against the limit.",
    )
    shm: Quantity = Field(
        "1Gi", description="Size of /dev/shm (a Memory emptyDir with this sizeLimit)."
    )

    @model_validator(mode="after")
    def _limits(self) -> Resources:
        if self.cpu_limit is not None and quantity_value(self.cpu_limit) <= quantity_value(
            self.cpu
        ):
            raise ValueError("resources.cpuLimit must be above resources.cpu")
        if quantity_value(self.shm) <= 0:
            raise ValueError("resources.shm must be positive")
        return self


class Serving(_Spec):
    max_queue: int = Field(256, ge=1, description="Queued requests per model before 503.")
    max_concurrent_sequences: int | None = Field(
        None, ge=1, description="Sequences decoded at once (generative models)."
    )
    max_context_tokens: int | None = Field(
        None, ge=1, description="Longest prompt + max_tokens accepted (generative models)."
    )
    longest_request_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="Longest request the service allows; the drain and grace period cover it.",
    )


class ScalingEngine(StrEnum):
    HPA = "hpa"
    KEDA = "keda"


class ScalingMetric(StrEnum):
    QUEUE_DEPTH = "queue-depth"
    INFLIGHT = "inflight"
    TTFT_P95 = "ttft-p95"
    CPU = "cpu"


class Activation(_Spec):
    query: str = Field(
        min_length=1,
        description="PromQL for demand seen outside the pods (e.g. the gateway's request "
        "rate): at zero replicas no pod exports a queue depth.",
    )
    threshold: str = Field(
        "1", pattern=r"^[0-9]+(\.[0-9]+)?$", description="KEDA threshold for that query."
    )


class Autoscaling(_Spec):
    engine: ScalingEngine = Field(ScalingEngine.KEDA, description="`hpa` or `keda`.")
    metric: ScalingMetric = Field(
        ScalingMetric.QUEUE_DEPTH,
        description="`queue-depth` (default), `inflight`, `ttft-p95` (generative) or `cpu` "
        "(refused for GPU models unless forceCpu).",
    )
    target: str = Field(
        "4",
        pattern=r"^[0-9]+(\.[0-9]+)?$",
        description="Per-pod target: queued or in-flight requests, seconds for ttft-p95, "
        "percent utilization for cpu.",
    )
    force_cpu: bool = Field(
        False, description="Allow `cpu` for a GPU model (a warning is still printed)."
    )
    scale_to_zero: bool = Field(
        False, description="Let KEDA scale to zero when idle (needs `activation`)."
    )
    activation: Activation | None = Field(
        None, description="Demand query that wakes the service from zero."
    )
    scale_down_stabilization_seconds: int | None = Field(
        None,
        ge=0,
        le=3600,
        description="Scale-down window; default max(600, 2 x load seconds), at most 3600.",
    )
    prometheus_address: str = Field(
        "http://prometheus-operated.monitoring.svc:9090",
        description="Prometheus that KEDA queries.",
    )
    polling_interval_seconds: int = Field(15, ge=1, description="KEDA polling interval.")


class Rollout(_Spec):
    strategy: Literal["RollingUpdate", "Recreate"] = Field(
        "RollingUpdate", description="Deployment strategy."
    )
    spare_gpu: bool | None = Field(
        None,
        description="A spare GPU exists for a surge pod (maxSurge 1, maxUnavailable 0); "
        "otherwise maxSurge 0, maxUnavailable 1. Default: true when headroom pods are rendered.",
    )


class Disruption(_Spec):
    min_available: int | None = Field(
        None, ge=0, description="PDB minAvailable; must stay below replicas.min."
    )
    max_unavailable: int | None = Field(None, ge=1, description="PDB maxUnavailable.")

    @model_validator(mode="after")
    def _one(self) -> Disruption:
        if self.min_available is not None and self.max_unavailable is not None:
            raise ValueError("disruption takes minAvailable or maxUnavailable, not both")
        return self


class Spread(_Spec):
    nodes: bool = Field(True, description="Spread replicas across nodes (hostname).")
    zones: bool = Field(False, description="Also spread across zones.")
    hard: bool = Field(
        False,
        description="DoNotSchedule instead of ScheduleAnyway: stricter, but can leave pods "
        "Pending when GPU nodes are few.",
    )


class Cache(_Spec):
    kind: Literal["hostPath", "pvc", "emptyDir"] = Field(
        "hostPath",
        description="hostPath: shared per node (fetch once per node); pvc: a claim "
        "(ReadWriteMany for a Deployment, one per replica for a StatefulSet); emptyDir: "
        "download at every start.",
    )
    host_path: str = Field("/var/cache/podserve", description="Node directory for hostPath.")
    claim_name: str | None = Field(None, description="Existing claim (kind pvc, Deployment).")
    read_write_many: bool = Field(
        False, description="The claim is ReadWriteMany (required to share it across pods)."
    )
    storage_class: str | None = Field(None, description="StorageClass of per-replica claims.")
    size: Quantity | None = Field(None, description="Size of emptyDir or per-replica claims.")


class Canary(_Spec):
    model: ModelSource = Field(description="The candidate model.")
    image: Image | None = Field(None, description="Candidate image; default: the stable one.")
    percent: int = Field(10, ge=0, le=100, description="Share of traffic sent to the canary.")
    replicas: int = Field(1, ge=1, description="Canary replicas (not autoscaled).")


class GatewayRef(_Spec):
    name: str = Field(description="Gateway to attach the HTTPRoute to.")
    namespace: str | None = Field(None, description="Its namespace (default: the service's).")
    section_name: str | None = Field(None, description="Listener name.")
    hostnames: list[str] = Field(default_factory=list, description="Route hostnames.")
    path: str = Field("/", pattern=r"^/", description="Path prefix routed to the service.")


class InferencePoolSpec(_Spec):
    endpoint_picker: str = Field(
        description="Service of the endpoint picker (EPP) that chooses a pod per request."
    )
    endpoint_picker_port: int = Field(9002, ge=1, le=65535, description="EPP gRPC port.")
    fail_open: bool = Field(
        False, description="Route anyway when the EPP is down (FailOpen); default FailClose."
    )


class BatchJob(_Spec):
    name: str = Field(pattern=_DNS_LABEL, max_length=30, description="Job name suffix.")
    command: list[str] = Field(
        min_length=1,
        description="Command run in the server image (exec form), e.g. a batch script that "
        "reads inputs and writes predictions.",
    )
    schedule: str | None = Field(None, description="Cron schedule: a CronJob instead of a Job.")
    parallelism: int = Field(1, ge=1, description="Pods at once.")
    completions: int = Field(1, ge=1, description="Successful pods needed.")
    backoff_limit: int = Field(2, ge=0, description="Retries before the Job fails.")
    active_deadline_seconds: int | None = Field(None, ge=1, description="Hard time limit.")
    spot: bool = Field(
        True, description="May run on spot/preemptible nodes (batch can be retried)."
    )


class Quota(_Spec):
    gpus: int | None = Field(None, ge=0, description="Namespace cap on the GPU resource.")
    cpu: Quantity | None = Field(None, description="Namespace cap on CPU requests.")
    memory: Quantity | None = Field(None, description="Namespace cap on memory requests.")
    pods: int | None = Field(None, ge=1, description="Namespace cap on pods.")
    limit_range: bool = Field(
        True, description="Also render a LimitRange with defaults for containers without any."
    )


class CapacityType(StrEnum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"


class Capacity(_Spec):
    provider: Literal["gke", "eks", "karpenter", "aks"] = Field(
        "karpenter", description="Sets the spot node label and reclaim notice."
    )
    serving: CapacityType = Field(
        CapacityType.ON_DEMAND,
        description="on-demand: serving prefers on-demand nodes; spot: serving may run on "
        "spot nodes (the grace period must fit the reclaim notice).",
    )


class ColdStart(_Spec):
    pre_pull: bool = Field(
        False,
        description="DaemonSet that pulls the image (and fetches a hostPath cache) on "
        "every GPU node before a pod needs it.",
    )
    headroom_pods: int = Field(
        0,
        ge=0,
        le=64,
        description="Low-priority pause pods holding GPUs, preempted by a surge or scale-up.",
    )


class Monitoring(_Spec):
    pod_monitor: bool = Field(True, description="Render a PodMonitor.")
    rules: bool = Field(True, description="Render a PrometheusRule with serving alerts.")
    ttft_p99_seconds: float = Field(5.0, gt=0, description="TTFT p99 alert threshold.")
    error_ratio: float = Field(0.05, gt=0, lt=1, description="5xx ratio alert threshold.")


class Timing(_Spec):
    pre_stop_seconds: int = Field(
        10,
        ge=1,
        le=120,
        description="Sleep before SIGTERM so endpoint removal reaches every load balancer.",
    )
    margin_seconds: int = Field(
        5, ge=1, le=120, description="Slack in the grace period after the longest request."
    )


class Evaluation(_Spec):
    schedule: str = Field(
        "17 * * * *", min_length=1, description="Cron schedule of the `podserve eval` CronJob."
    )
    suite: str | None = Field(
        None,
        min_length=1,
        description="The golden set inline (JSONL, one case a line; docs/eval.md), rendered "
        "into the ConfigMap `<name>-eval-suite`. Give this or suiteConfigMap.",
    )
    suite_config_map: str | None = Field(
        None,
        pattern=_DNS_SUBDOMAIN,
        description="Existing ConfigMap with the golden set under the key `suite.jsonl`.",
    )
    suite_name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$",
        description="`suite` label of the metrics; default `<namespace>.<name>`.",
    )
    baseline_config_map: str | None = Field(
        None,
        pattern=_DNS_SUBDOMAIN,
        description="ConfigMap with a stored result (`podserve eval --save-baseline`) under "
        "the key `baseline.json`: each run fails on a drop beyond maxDrop against it.",
    )
    max_drop: float = Field(
        0.05, ge=0, le=1, description="Largest allowed fall of a pass ratio vs the baseline."
    )
    min_pass_ratio: float = Field(
        0.95,
        ge=0,
        le=1,
        description="Below this overall pass ratio the run fails and PodserveEvalRegression fires.",
    )
    pushgateway: str | None = Field(
        None,
        pattern=r"^https?://",
        description="Pushgateway URL the run pushes its metrics to, e.g. "
        "`http://prometheus-pushgateway.monitoring.svc:9091`.",
    )
    textfile_dir: str | None = Field(
        None,
        pattern=r"^/",
        description="Node directory of node-exporter's textfile collector (a hostPath) to "
        "write the metrics to, instead of or besides a Pushgateway.",
    )
    concurrency: int = Field(4, ge=1, le=64, description="Requests in flight during a run.")
    timeout_seconds: float = Field(30.0, gt=0, le=600, description="Per-request timeout.")
    deadline_seconds: int = Field(
        900, ge=60, le=86400, description="activeDeadlineSeconds of each run."
    )
    stale_after_seconds: int = Field(
        10800,
        ge=300,
        description="PodserveEvalStale fires when the last run is older than this (about "
        "three periods of the schedule).",
    )
    alerts: bool = Field(
        True, description="Render a PrometheusRule with PodserveEvalRegression and -Stale."
    )

    @model_validator(mode="after")
    def _sources(self) -> Evaluation:
        if (self.suite is None) == (self.suite_config_map is None):
            raise ValueError("eval takes suite (inline) or suiteConfigMap, exactly one")
        if self.alerts and self.pushgateway is None and self.textfile_dir is None:
            raise ValueError(
                "eval alerts need the metrics exported: set eval.pushgateway or "
                "eval.textfileDir (or alerts: false)"
            )
        return self


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
    network_policy: bool = Field(
        True, description="Render a NetworkPolicy admitting only the serving ports."
    )
    service_account_token: bool = Field(
        False, description="Mount a service-account token (only if the pod calls the API)."
    )

    @model_validator(mode="after")
    def _coherent(self) -> ModelServiceSpec:
        scaling, bounds = self.autoscaling, self.replicas
        if scaling is None and bounds.min != bounds.max:
            raise ValueError("replicas.min != replicas.max needs an autoscaling section")
        if scaling is not None:
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
        return self


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
