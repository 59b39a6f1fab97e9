"""KEDA's activation, cooldown and fallback; the serving model's accounting; traces and
events as the CLI reads them."""

from __future__ import annotations

import numpy as np
import pytest

from podserve.core.errors import InvalidInput
from podserve.kube.simulate.cron import active_minutes, is_active
from podserve.kube.simulate.events import parse_event
from podserve.kube.simulate.keda import KedaController
from podserve.kube.simulate.objects import Metric, ScaledObject, ServingParams, Signal
from podserve.kube.simulate.serving import Fleet, erlang_c
from podserve.kube.simulate.traffic import arrivals, parse_trace, split


def scaled_object(**kw: object) -> ScaledObject:
    base: dict[str, object] = dict(
        name="m",
        target="m",
        polling_s=30,
        cooldown_s=300,
        initial_cooldown_s=0,
        min_replicas=0,
        max_replicas=10,
        triggers=(Metric("External", Signal.QUEUE, "AverageValue", 5.0, activation=2.0),),
        fallback_failures=None,
        fallback_replicas=None,
        behavior=None,
    )
    base.update(kw)
    return ScaledObject(**base)  # type: ignore[arg-type]


def test_activation_is_strictly_above_the_threshold() -> None:
    keda = KedaController.for_spec(scaled_object())
    assert keda.poll(0, 0, [2.0]) is None  # 2 is not > 2
    assert keda.next_poll_t == 30
    assert keda.poll(30, 0, [2.5]) == 1
    keda = KedaController.for_spec(scaled_object(min_replicas=3))
    assert keda.poll(0, 0, [9.0]) == 3  # activation jumps to minReplicaCount
    assert keda.poll(30, 1, [0.0]) == 3  # and nothing stays below it
    assert keda.poll(60, 3, [0.0]) is None  # never to zero with a minimum


def test_cooldown_to_zero_counts_from_the_last_activity() -> None:
    keda = KedaController.for_spec(scaled_object())
    assert keda.poll(0, 1, [5.0]) is None
    assert keda.poll(200, 1, [0.0]) is None  # 200 s since active < 300
    assert keda.poll(300, 1, [0.0]) == 0
    # Never active: scales to zero once the initial cooldown has passed.
    keda = KedaController.for_spec(scaled_object(initial_cooldown_s=60))
    assert keda.poll(0, 1, [0.0]) is None
    assert keda.poll(60, 1, [0.0]) == 0


def test_fallback_after_consecutive_failures() -> None:
    keda = KedaController.for_spec(scaled_object(fallback_failures=3, fallback_replicas=4))
    assert keda.poll(0, 2, None) is None
    assert keda.poll(30, 2, None) is None
    assert keda.poll(60, 2, None) == 4
    assert keda.fallback_active
    assert keda.poll(90, 4, [9.0]) is None
    assert not keda.fallback_active
    keda = KedaController.for_spec(scaled_object())
    assert [keda.poll(t, 0, None) for t in (0, 30, 60, 90)] == [None] * 4  # no fallback set


def test_keda_hpa_floor_is_one() -> None:
    assert KedaController.for_spec(scaled_object()).hpa.min_replicas == 1


def test_cron_window_on_the_simulated_week() -> None:
    table = active_minutes("0 7 * * 1-5", "0 19 * * 1-5")  # second 0 is Monday 00:00
    assert not is_active(table, 6 * 3600)
    assert is_active(table, 7 * 3600)
    assert not is_active(table, 19 * 3600)
    assert not is_active(table, 5 * 86400 + 8 * 3600)  # Saturday


def params(concurrency: int = 2, queue: int = 3, service_s: float = 0.5) -> ServingParams:
    return ServingParams(concurrency, queue, service_s, service_s * 2, "test")


def test_fleet_admits_up_to_concurrency_plus_queue_and_rejects_the_rest() -> None:
    fleet = Fleet(params())
    # 4 slots finish 8 requests a second; 12 are left, of which 2 x (2 + 3) = 10 may wait.
    served, rejected, _ = fleet.step(20, ready=2)
    assert (served, rejected, fleet.in_system) == (8, 2, 10)
    assert fleet.occupancy == 10 + 8 * 0.5
    assert fleet.step(0, ready=2)[:2] == (8, 0)
    assert fleet.step(0, ready=2)[:2] == (2, 0)
    assert fleet.in_system == 0
    assert fleet.step(7, ready=0) == (0, 7, 0.0)  # no ready pod: everything is rejected


def test_pod_leaving_takes_its_share_of_in_flight() -> None:
    fleet = Fleet(params(service_s=10.0))
    fleet.step(9, ready=3)
    assert fleet.in_system == 9
    assert fleet.take_share(3) == 3
    assert fleet.in_system == 6


def test_latency_grows_with_the_queue() -> None:
    assert erlang_c(1, 0.5) == pytest.approx(0.5)
    assert erlang_c(4, 0.0) == 0.0
    assert erlang_c(2, 3.0) == 1.0
    light = Fleet(params(concurrency=4, queue=100, service_s=0.1)).step(5, ready=1)[2]
    heavy = Fleet(params(concurrency=4, queue=100, service_s=0.1)).step(80, ready=1)[2]
    assert 0.2 <= light < heavy


def test_trace_parsing_and_poisson_arrivals() -> None:
    trace = parse_trace("seconds,requests_per_second\n0,10\n5,0\n")
    assert list(trace.rates(8)) == [10.0] * 5 + [0.0] * 3
    a = arrivals(trace, 8, seed=3)
    assert (a[5:] == 0).all()
    assert a[:5].sum() > 0
    assert (arrivals(trace, 8, seed=3) == a).all()  # deterministic for a seed
    parts = split(np.array([100, 50]), [0.9, 0.1], seed=1)
    assert (parts[0] + parts[1] == [100, 50]).all()
    for bad in ("", "x,y\n1,2,\n0,a", "5,1\n3,1", "-1,2"):
        with pytest.raises(InvalidInput):
            parse_trace(bad)


def test_event_parsing() -> None:
    assert parse_event("spot-reclaim@600:t4-spot").arg == "t4-spot"
    assert parse_event("rollout@30").arg is None
    assert parse_event("metrics-down@10:120").t == 10
    for bad in ("rollout", "reboot@5", "spot-reclaim@5", "metrics-down@5:0", "rollout@-1"):
        with pytest.raises(InvalidInput):
            parse_event(bad)


def test_trigger_signals_from_queries_and_scaler_types() -> None:
    from podserve.kube.simulate.autoscalers import classify, rate_window_s, scaled_object

    assert classify('sum(rate(envoy_cluster_upstream_rq_total{x="y"}[2m]))') is Signal.RATE
    assert rate_window_s("sum(rate(x[2m]))") == 120
    assert classify("sum(vllm:num_requests_waiting)") is Signal.QUEUE
    assert classify("sum(podserve_queue_depth)") is Signal.QUEUE
    assert classify("podserve_ttft_p95_seconds") is Signal.LATENCY
    assert classify("sum(podserve_inflight_requests)") is Signal.INFLIGHT
    doc = {
        "kind": "ScaledObject",
        "metadata": {"name": "c"},
        "spec": {
            "scaleTargetRef": {"name": "c"},
            "triggers": [
                {
                    "type": "redis-streams",
                    "metadata": {"pendingEntriesCount": "20", "activationLagCount": "1"},
                },
                {
                    "type": "cron",
                    "metadata": {"start": "0 7 * * *", "end": "0 19 * * *", "desiredReplicas": "2"},
                },
            ],
        },
    }
    spec = scaled_object(doc)
    assert (spec.polling_s, spec.cooldown_s, spec.min_replicas, spec.max_replicas) == (
        30,
        300,
        0,
        100,
    )
    lag, cron = spec.triggers
    assert (lag.signal, lag.target, lag.activation) == (Signal.QUEUE, 20.0, 1.0)
    assert (cron.signal, cron.schedule) == (Signal.SCHEDULE, ("0 7 * * *", "0 19 * * *"))
