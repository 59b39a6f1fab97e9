"""`ModelService` sections about operating the service: autoscaling, canary and gateway,
inference pool, batch jobs, quotas, cold starts, monitoring, timing and evaluation."""

from __future__ import annotations

from enum import StrEnum

from pydantic import (
    Field,
    model_validator,
)

from podserve.config.service_base import (
    _DNS_LABEL,
    _DNS_SUBDOMAIN,
    Quantity,
    _Spec,
)
from podserve.config.service_pod import Image, ModelSource


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
        description="PromQL for demand seen outside the pods that moves while the service "
        "has no endpoints: e.g. the gateway's downstream or route request count, or its 503 "
        "count (Envoy counts `upstream_cx_none_healthy`, not `upstream_rq_total`, for a "
        "cluster without endpoints). At zero replicas no pod exports a queue depth.",
    )
    threshold: str = Field(
        "0",
        pattern=r"^[0-9]+(\.[0-9]+)?$",
        description="KEDA `activationThreshold`: the service wakes when the query is above "
        "it (strictly).",
    )
    target: str | None = Field(
        None,
        pattern=r"^[0-9]+(\.[0-9]+)?$",
        description="Per-replica value of the query for scaling 1..N as well; default: the "
        "query only wakes the service and the main metric scales it.",
    )


_CRON = r"^\S+ \S+ \S+ \S+ \S+$"


class ActiveWindow(_Spec):
    start: str = Field(pattern=_CRON, description="Cron expression opening the window.")
    end: str = Field(pattern=_CRON, description="Cron expression closing the window.")
    timezone: str = Field(
        pattern=r"^(UTC|[A-Z][A-Za-z_]+(/[A-Za-z0-9_+-]+)+)$",
        description="IANA time zone of the cron expressions, e.g. `Europe/Berlin`.",
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
    scale_up_stabilization_seconds: int | None = Field(
        None,
        ge=0,
        le=3600,
        description="Scale-up window: the HPA acts on the lowest recommendation within it, "
        "so a spike shorter than the window buys no nodes that would arrive after it. "
        "Default: 60 for GPU models, 0 for CPU models.",
    )
    fallback_replicas: int | None = Field(
        None,
        ge=1,
        description="KEDA fallback: after 3 failed metric reads the service holds at least "
        "this many replicas (and never scales down blind). Default: max(1, replicas.min + "
        "1), capped at replicas.max. Not available with metric cpu.",
    )
    active_hours: list[ActiveWindow] = Field(
        default_factory=list,
        description="Windows (cron start/end in a time zone) when the service runs; outside "
        "all of them it scales to zero (a KEDA cron trigger beside the queue trigger: "
        "replicas.min inside a window, 0 outside, the queue decides above the floor).",
    )


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
    endpoint_picker: str | None = Field(
        None,
        pattern=_DNS_LABEL,
        description="Service of the stable pool's endpoint picker (EPP). One EPP serves one "
        "pool (`--pool-name`), so each track needs its own. Default: `<name>-epp`, the "
        "name the Inference Extension chart gives a release named after the pool.",
    )
    canary_endpoint_picker: str | None = Field(
        None,
        pattern=_DNS_LABEL,
        description="Service of the canary pool's EPP. Default: `<name>-canary-epp`.",
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
    active_deadline_seconds: int = Field(
        21600,
        ge=1,
        description="Hard time limit of each run: a hung job otherwise holds its GPUs "
        "forever, and a CronJob (concurrencyPolicy Forbid) never starts again.",
    )
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
