"""HorizontalPodAutoscaler v2, one reconcile at a time on an injected clock.

Follows kubernetes/kubernetes pkg/controller/podautoscaler: `replica_calculator.go` (the
ratio, the tolerance, missing and unready pods), `horizontal.go` (one proposal per metric,
the max wins; errors block scale-down only; `normalizeDesiredReplicas` without behavior,
`stabilizeRecommendationWithBehaviors` and `convertDesiredReplicasWithBehaviorRate` with
it). Defaults: sync period 15 s, tolerance 0.1, downscale stabilization 300 s
(pkg/controller/podautoscaler/config/v1alpha1/defaults.go). Worked examples from
https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/ are tests."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from podserve.kube.simulate.objects import Behavior, ScaleRules

SYNC_PERIOD_S = 15
TOLERANCE = 0.1
DOWNSCALE_WINDOW_S = 300


@dataclass(frozen=True, slots=True)
class PodSample:
    """One pod as the replica calculator sees it."""

    value: float | None  # None: no sample (missing pod)
    unready: bool = False  # phase Pending (any metric), or not yet Ready (cpu only)


def within(ratio: float, tolerance_down: float, tolerance_up: float) -> bool:
    return 1.0 - tolerance_down <= ratio <= 1.0 + tolerance_up


def pods_metric_replicas(
    current: int,
    samples: Sequence[PodSample],
    target: float,
    tolerance: tuple[float, float] = (TOLERANCE, TOLERANCE),
    missing_down_value: float | None = None,
) -> int | None:
    """`calcPlainMetricReplicas` (Pods AverageValue; Resource Utilization with values in
    percent). None when no pod has a sample (the metric is invalid)."""
    ready = [s.value for s in samples if not s.unready and s.value is not None]
    unready = sum(1 for s in samples if s.unready)
    missing = sum(1 for s in samples if not s.unready and s.value is None)
    if not ready:
        return None
    ratio = (sum(ready) / len(ready)) / target
    scale_up_with_unready = unready > 0 and ratio > 1.0
    if not scale_up_with_unready and missing == 0:
        if within(ratio, *tolerance):
            return current
        return math.ceil(ratio * len(ready))
    values = list(ready)
    if missing:
        # Scale-down: a missing pod is assumed at the target (Resource: request x
        # max(100, target)%), scale-up: at 0, so that neither overshoots.
        fill = (
            (missing_down_value if missing_down_value is not None else target) if ratio < 1 else 0
        )
        values += [fill] * missing
    if scale_up_with_unready:
        values += [0.0] * unready
    new_ratio = (sum(values) / len(values)) / target
    if within(new_ratio, *tolerance) or (ratio > 1 > new_ratio) or (ratio < 1 < new_ratio):
        return current
    proposed = math.ceil(new_ratio * len(values))
    if (new_ratio < 1.0 and proposed > current) or (new_ratio > 1.0 and proposed < current):
        return current
    return proposed


def external_average_replicas(
    status_replicas: int,
    total: float,
    target: float,
    tolerance: tuple[float, float] = (TOLERANCE, TOLERANCE),
) -> int:
    """External AverageValue (`GetExternalPerPodMetricReplicas`): the tolerance is checked on
    total / (target x status.replicas); the result is ceil(total / target)."""
    ratio = math.inf if status_replicas == 0 else total / (target * status_replicas)
    if within(ratio, *tolerance):
        return status_replicas
    return math.ceil(total / target)


def external_value_replicas(
    current: int,
    ready_pods: int,
    value: float,
    target: float,
    tolerance: tuple[float, float] = (TOLERANCE, TOLERANCE),
) -> int:
    """External/Object Value (`getUsageRatioReplicaCount`)."""
    ratio = value / target
    if current == 0:
        return math.ceil(ratio)
    if within(ratio, *tolerance):
        return current
    return math.ceil(ratio * ready_pods)


@dataclass(slots=True)
class _Event:
    t: float
    change: int


@dataclass(slots=True)
class HpaController:
    """The autoscaler's memory for one HPA: past recommendations and scale events."""

    min_replicas: int
    max_replicas: int
    behavior: Behavior | None
    recommendations: list[tuple[float, int]] = field(default_factory=list)
    up_events: list[_Event] = field(default_factory=list)
    down_events: list[_Event] = field(default_factory=list)
    last_reason: str = ""

    def tolerance(self) -> tuple[float, float]:
        """(down, up): `behavior.scale{Down,Up}.tolerance` or the flag's 0.1 (KEP-4951)."""
        if self.behavior is None:
            return (TOLERANCE, TOLERANCE)
        down = self.behavior.scale_down.tolerance
        up = self.behavior.scale_up.tolerance
        return (TOLERANCE if down is None else down, TOLERANCE if up is None else up)

    def reconcile(self, now: float, current: int, proposals: Sequence[int | None]) -> int:
        """Desired replicas for `spec.replicas == current`, given one proposal per metric
        (None: that metric could not be computed)."""
        if current == 0 and self.min_replicas != 0:
            self.last_reason = "ScalingDisabled"
            return 0
        if current > self.max_replicas:
            self.last_reason = "TooManyReplicas"
            return self._record(now, current, self.max_replicas)
        if current < self.min_replicas:
            self.last_reason = "TooFewReplicas"
            return self._record(now, current, self.min_replicas)
        valid = [p for p in proposals if p is not None]
        if not valid:
            self.last_reason = "FailedGetMetrics"
            return current
        metric_desired = max(valid)
        if len(valid) < len(proposals) and metric_desired < current:
            # Some metrics failed: a scale-down could be wrong, so none happens.
            self.last_reason = "FailedGetMetrics"
            return current
        if self.behavior is None:
            desired = self._normalize(now, current, metric_desired)
        else:
            desired = self._normalize_with_behavior(now, current, metric_desired)
        return self._record(now, current, desired)

    def _record(self, now: float, current: int, desired: int) -> int:
        if self.behavior is not None and desired != current:
            event = _Event(now, abs(desired - current))
            (self.up_events if desired > current else self.down_events).append(event)
        return desired

    def _normalize(self, now: float, current: int, desired: int) -> int:
        """No behavior: the max recommendation of the last 300 s, a scale-up limit of
        max(2 x current, 4), then min/max."""
        self.last_reason = "DesiredWithinRange"
        self.recommendations = [
            (t, r) for t, r in self.recommendations if t > now - DOWNSCALE_WINDOW_S
        ]
        self.recommendations.append((now, desired))
        stabilized = max(r for _, r in self.recommendations)
        if stabilized != desired:
            self.last_reason = "ScaleDownStabilized"
        limit = max(2 * current, 4)
        upper = min(limit, self.max_replicas)
        if stabilized > upper:
            self.last_reason = "ScaleUpLimit" if limit < self.max_replicas else "TooManyReplicas"
            return upper
        if stabilized < self.min_replicas:
            self.last_reason = "TooFewReplicas"
            return self.min_replicas
        return stabilized

    def _window(self, rules: ScaleRules, default: int) -> int:
        return default if rules.window_s is None else rules.window_s

    def _normalize_with_behavior(self, now: float, current: int, desired: int) -> int:
        assert self.behavior is not None
        up_window = self._window(self.behavior.scale_up, 0)
        down_window = self._window(self.behavior.scale_down, DOWNSCALE_WINDOW_S)
        longest = max(up_window, down_window)
        self.recommendations = [(t, r) for t, r in self.recommendations if t > now - longest]
        up_rec = min([r for t, r in self.recommendations if t > now - up_window] + [desired])
        down_rec = max([r for t, r in self.recommendations if t > now - down_window] + [desired])
        self.recommendations.append((now, desired))
        stabilized = current
        self.last_reason = "DesiredWithinRange"
        if stabilized < up_rec:
            stabilized = up_rec
        if stabilized > down_rec:
            stabilized = down_rec
        if stabilized != desired:
            self.last_reason = "ScaleUpStabilized" if desired > current else "ScaleDownStabilized"
        return self._rate_limit(now, current, stabilized)

    def _changes(self, events: list[_Event], now: float, period_s: int) -> int:
        return sum(e.change for e in events if e.t > now - period_s)

    def _rate_limit(self, now: float, current: int, desired: int) -> int:
        assert self.behavior is not None
        if desired > current:
            limit = self._up_limit(now, current, self.behavior.scale_up)
            allowed = min(self.max_replicas, max(limit, current))
            if desired > allowed:
                self.last_reason = "ScaleUpLimit"
                return allowed
        elif desired < current:
            limit = self._down_limit(now, current, self.behavior.scale_down)
            allowed = max(self.min_replicas, min(limit, current))
            if desired < allowed:
                self.last_reason = "ScaleDownLimit"
                return allowed
        return desired

    def _up_limit(self, now: float, current: int, rules: ScaleRules) -> int:
        if rules.select == "Disabled":
            return current
        pick = min if rules.select == "Min" else max
        result: int | None = None
        for policy in rules.policies:
            start = (
                current
                - self._changes(self.up_events, now, policy.period_s)
                + self._changes(self.down_events, now, policy.period_s)
            )
            if policy.kind == "Pods":
                proposed = start + policy.value
            else:
                proposed = math.ceil(start * (1 + policy.value / 100))
            result = proposed if result is None else pick(result, proposed)
        return current if result is None else result

    def _down_limit(self, now: float, current: int, rules: ScaleRules) -> int:
        if rules.select == "Disabled":
            return current
        # Scale-down "Max" means the largest change, i.e. the smallest proposal.
        pick = max if rules.select == "Min" else min
        result: int | None = None
        for policy in rules.policies:
            start = (
                current
                - self._changes(self.up_events, now, policy.period_s)
                + self._changes(self.down_events, now, policy.period_s)
            )
            if policy.kind == "Pods":
                proposed = start - policy.value
            else:
                proposed = int(start * (1 - policy.value / 100))
            result = proposed if result is None else pick(result, proposed)
        return current if result is None else result

    def prune(self, now: float) -> None:
        """Drop scale events older than any policy period (kept small on long runs)."""
        if self.behavior is None:
            return
        longest = max(
            [
                p.period_s
                for p in self.behavior.scale_up.policies + self.behavior.scale_down.policies
            ]
            + [0]
        )
        self.up_events = [e for e in self.up_events if e.t > now - longest]
        self.down_events = [e for e in self.down_events if e.t > now - longest]
