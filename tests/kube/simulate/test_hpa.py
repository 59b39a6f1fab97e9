"""HPA v2 rules against the worked examples of
https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/ and the
controller's source (replica_calculator.go, horizontal.go)."""

from __future__ import annotations

from podserve.kube.simulate.autoscalers import DEFAULT_SCALE_DOWN, DEFAULT_SCALE_UP
from podserve.kube.simulate.hpa import (
    HpaController,
    PodSample,
    external_average_replicas,
    external_value_replicas,
    pods_metric_replicas,
)
from podserve.kube.simulate.objects import Behavior, Policy, ScaleRules


def _ready(values: list[float]) -> list[PodSample]:
    return [PodSample(v) for v in values]


def test_doc_ratio_doubles_and_halves() -> None:
    # "current metric value is 200m, desired 100m: the number of replicas will be doubled";
    # "50m: halve the number of replicas".
    assert pods_metric_replicas(4, _ready([0.2] * 4), 0.1) == 8
    assert pods_metric_replicas(4, _ready([0.05] * 4), 0.1) == 2


def test_doc_tolerance_skips_ratios_close_to_one() -> None:
    # "skips any scaling action if the ratio is sufficiently close to 1.0 (0.1 by default)"
    assert pods_metric_replicas(4, _ready([1.09] * 4), 1.0) == 4
    assert pods_metric_replicas(4, _ready([0.91] * 4), 1.0) == 4
    assert pods_metric_replicas(4, _ready([1.11] * 4), 1.0) == 5  # ceil(1.11 x 4)
    assert pods_metric_replicas(4, _ready([1.05] * 4), 1.0, tolerance=(0.1, 0.0)) == 5


def test_missing_pods_count_as_target_on_scale_down_and_zero_on_scale_up() -> None:
    # Scale-down: missing pods assumed at 100% of target, dampening the move.
    samples = [*_ready([0.5, 0.5]), PodSample(None), PodSample(None)]
    assert pods_metric_replicas(4, samples, 1.0) == 3  # mean (0.5+0.5+1+1)/4=0.75 → ceil(3)
    # Scale-up: missing pods assumed at 0.
    samples = [*_ready([2.0, 2.0]), PodSample(None), PodSample(None)]
    assert pods_metric_replicas(4, samples, 1.0) == 4  # new ratio 1.0 → within → current


def test_unready_pods_count_as_zero_only_on_scale_up() -> None:
    samples = [*_ready([3.0, 3.0]), PodSample(None, unready=True), PodSample(None, unready=True)]
    assert pods_metric_replicas(4, samples, 1.0) == 6  # (3+3+0+0)/4 = 1.5 → ceil(6)
    samples = [*_ready([0.2, 0.2]), PodSample(None, unready=True)]
    assert pods_metric_replicas(3, samples, 1.0) == 1  # unready ignored on scale-down


def test_no_samples_is_an_invalid_metric() -> None:
    assert pods_metric_replicas(2, [PodSample(None, unready=True)], 1.0) is None


def test_external_average_value_is_ceil_of_total_over_target() -> None:
    assert external_average_replicas(2, 100.0, 8.0) == 13
    assert external_average_replicas(2, 17.0, 8.0) == 2  # 17/16 within tolerance
    assert external_average_replicas(0, 1.0, 8.0) == 1
    assert external_value_replicas(3, 3, 20.0, 10.0) == 6
    assert external_value_replicas(0, 0, 20.0, 10.0) == 2


def test_without_behavior_the_max_of_five_minutes_wins_and_up_is_limited() -> None:
    hpa = HpaController(1, 100, None)
    assert hpa.reconcile(0, 2, [50]) == 4  # scale-up limit max(2 x 2, 4)
    # The metric now asks for 3, but the max recommendation of the last 300 s is 50,
    # capped by the per-reconcile limit max(2 x 4, 4) = 8.
    assert hpa.reconcile(15, 4, [3]) == 8
    assert hpa.last_reason == "ScaleUpLimit"
    assert hpa.reconcile(400, 8, [3]) == 3  # the 50 has left the window


def test_doc_scale_down_policies_percent_and_pods() -> None:
    # behavior.scaleDown: Pods 4/60s and Percent 10/60s, selectPolicy Max (the larger
    # change): at 80 replicas the percent policy removes 8 → 72; int32 truncation.
    rules = ScaleRules(0, "Max", (Policy("Pods", 4, 60), Policy("Percent", 10, 60)))
    hpa = HpaController(1, 100, Behavior(DEFAULT_SCALE_UP, rules))
    assert hpa.reconcile(0, 80, [10]) == 72
    # Within the same 60 s period the budget is spent: start = 72 + 8 = 80 → 72 again.
    assert hpa.reconcile(15, 72, [10]) == 72
    assert hpa.reconcile(61, 72, [10]) == 64  # int(72 x 0.9) = 64


def test_doc_scale_up_default_policies() -> None:
    # Defaults: 4 pods or 100% every 15 s, whichever is larger.
    hpa = HpaController(1, 100, Behavior(DEFAULT_SCALE_UP, DEFAULT_SCALE_DOWN))
    assert hpa.reconcile(0, 1, [50]) == 5  # max(1 + 4, 1 x 2)
    assert hpa.reconcile(15, 5, [50]) == 10  # period restarts: max(9, 10)
    assert hpa.reconcile(30, 10, [50]) == 20


def test_doc_stabilization_window_keeps_the_highest_recommendation() -> None:
    behavior = Behavior(DEFAULT_SCALE_UP, ScaleRules(300, "Max", (Policy("Percent", 100, 15),)))
    hpa = HpaController(1, 10, behavior)
    assert hpa.reconcile(0, 5, [5]) == 5
    assert hpa.reconcile(15, 5, [2]) == 5  # 5 was recommended within 300 s
    assert hpa.last_reason == "ScaleDownStabilized"
    assert hpa.reconcile(301, 5, [2]) == 2


def test_disabled_scale_down_and_bounds() -> None:
    behavior = Behavior(DEFAULT_SCALE_UP, ScaleRules(0, "Disabled", ()))
    hpa = HpaController(2, 6, behavior)
    assert hpa.reconcile(0, 4, [1]) == 4
    assert hpa.reconcile(15, 4, [100]) == 6
    assert hpa.reconcile(30, 8, [8]) == 6  # above max → max
    assert hpa.reconcile(45, 1, [1]) == 2  # below min → min


def test_failed_metrics_block_scale_down_not_scale_up() -> None:
    hpa = HpaController(1, 10, None)
    assert hpa.reconcile(0, 4, [None]) == 4
    assert hpa.reconcile(15, 4, [1, None]) == 4
    assert hpa.reconcile(30, 4, [8, None]) == 8
    assert HpaController(1, 10, None).reconcile(0, 0, [5]) == 0  # ScalingDisabled at 0
