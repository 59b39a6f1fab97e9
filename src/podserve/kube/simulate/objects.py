"""What the simulator reads from manifests, as typed values: pod templates, workloads,
budgets and autoscalers (the controllers never look at raw YAML)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from podserve.kube.simulate.resources import Amounts


class Signal(StrEnum):
    """What a metric measures, in the simulator's terms."""

    INFLIGHT = "inflight"  # running + queued requests
    QUEUE = "queue"  # queued requests
    RATE = "rate"  # offered requests per second (seen before the pods, e.g. by Envoy)
    LATENCY = "latency"  # seconds
    CPU = "cpu"  # utilization percent of the request
    SCHEDULE = "schedule"  # KEDA cron: desiredReplicas inside the window, else 0


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # Equal | Exists
    value: str
    effect: str  # "" matches every effect


@dataclass(frozen=True, slots=True)
class Requirement:
    """A NodeSelectorRequirement (In, NotIn, Exists, DoesNotExist, Gt, Lt)."""

    key: str
    operator: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    hard: bool  # whenUnsatisfiable: DoNotSchedule
    selector: tuple[tuple[str, str], ...]  # matchLabels


@dataclass(frozen=True, slots=True)
class PodTemplate:
    labels: dict[str, str]
    requests: Amounts
    node_selector: dict[str, str]
    # Required node affinity: OR over terms, AND within a term.
    affinity_terms: tuple[tuple[Requirement, ...], ...]
    tolerations: tuple[Toleration, ...]
    spread: tuple[SpreadConstraint, ...]
    priority: int
    preempts: bool  # preemptionPolicy != Never
    grace_s: float
    pre_stop_s: float
    startup_budget_s: float | None  # None: no startup probe
    load_s: float
    model_size_gb: float  # 0: nothing to fetch
    fetches: bool  # has an init container that fetches weights
    shared_cache: bool  # hostPath cache: a second pod on the node skips the fetch
    image: str
    serves: bool  # has a readiness probe and a port: takes traffic


@dataclass(frozen=True, slots=True)
class ServingParams:
    concurrency: int  # requests served at once per pod (ceiling concurrency)
    max_queue: int  # waiting requests per pod before 503
    service_s: float  # mean service time of one request
    service_p99_s: float
    source: str  # where these came from: "bench", "spec" or "defaults"


@dataclass(frozen=True, slots=True)
class Workload:
    kind: str  # Deployment | StatefulSet
    name: str
    replicas: int
    strategy: str  # RollingUpdate | Recreate | OnDelete
    max_surge: int | str
    max_unavailable: int | str
    min_ready_s: float
    progress_deadline_s: float
    parallel: bool  # StatefulSet podManagementPolicy: Parallel
    template: PodTemplate
    serving: ServingParams | None


@dataclass(frozen=True, slots=True)
class Pdb:
    name: str
    selector: tuple[tuple[str, str], ...]
    min_available: int | str | None
    max_unavailable: int | str | None
    always_allow_unhealthy: bool = False  # unhealthyPodEvictionPolicy: AlwaysAllow


@dataclass(frozen=True, slots=True)
class Policy:
    kind: str  # Pods | Percent
    value: int
    period_s: int


@dataclass(frozen=True, slots=True)
class ScaleRules:
    window_s: int | None  # None: the controller's default (0 up, 300 down)
    select: str  # Max | Min | Disabled
    policies: tuple[Policy, ...]
    tolerance: float | None = None


@dataclass(frozen=True, slots=True)
class Behavior:
    scale_up: ScaleRules
    scale_down: ScaleRules


@dataclass(frozen=True, slots=True)
class Metric:
    source: str  # Resource | Pods | External
    signal: Signal
    target_type: str  # Utilization | AverageValue | Value
    target: float
    activation: float = 0.0  # KEDA activationThreshold
    rate_window_s: int = 0  # rate(...[2m]): the window Prometheus averages over
    schedule: tuple[str, str] | None = None  # KEDA cron (start, end)


@dataclass(frozen=True, slots=True)
class Hpa:
    name: str
    target: str  # workload name
    min_replicas: int
    max_replicas: int
    metrics: tuple[Metric, ...]
    behavior: Behavior | None


@dataclass(frozen=True, slots=True)
class ScaledObject:
    name: str
    target: str
    polling_s: int
    cooldown_s: int
    initial_cooldown_s: int
    min_replicas: int
    max_replicas: int
    triggers: tuple[Metric, ...]
    fallback_failures: int | None
    fallback_replicas: int | None
    behavior: Behavior | None
    fallback_behavior: str = "static"


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything the input manifests ask for."""

    workloads: tuple[Workload, ...]
    pdbs: tuple[Pdb, ...]
    hpas: tuple[Hpa, ...]
    scaled_objects: tuple[ScaledObject, ...]
    traffic_weights: dict[str, float] = field(default_factory=dict)  # workload → share
    ignored: tuple[str, ...] = ()  # kinds read but not simulated, for the summary
