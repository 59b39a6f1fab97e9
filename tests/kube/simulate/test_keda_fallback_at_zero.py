"""KEDA >= 2.17: fallback reaches the target only through the HPA, which is inactive at
zero replicas, so a metrics outage does not wake a scaled-to-zero target; above zero it
still lands on fallback.replicas (kedacore/keda pkg/fallback/fallback.go,
pkg/scaling/executor/scale_scaledobjects.go; kedacore/keda#6520, #7239)."""

from __future__ import annotations

from podserve.kube.simulate.keda import KedaController
from podserve.kube.simulate.objects import ScaledObject
from tests.kube.simulate.test_keda_serving import scaled_object


def _keda() -> KedaController:
    spec: ScaledObject = scaled_object(fallback_failures=2, fallback_replicas=3)
    return KedaController.for_spec(spec)


def test_fallback_does_not_wake_a_target_at_zero() -> None:
    keda = _keda()
    assert [keda.poll(t, 0, None) for t in (0, 30, 60, 90)] == [None] * 4
    assert keda.fallback_active  # the ScaledObject reports Fallback, nothing scales
    assert keda.last_reason != "fallback"


def test_fallback_still_holds_a_running_target() -> None:
    keda = _keda()
    assert keda.poll(0, 1, None) is None
    assert keda.poll(30, 1, None) == 3
    assert keda.last_reason == "fallback"
