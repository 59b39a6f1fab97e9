"""The three traces the issue observed on a real control plane (API server, controller
manager, scheduler), reproduced as scenarios."""

from __future__ import annotations

from podserve.kube.simulate import Simulation, build_summary, parse_event
from podserve.kube.simulate.pdb import TOO_MANY_REQUESTS
from podserve.kube.simulate.state import Phase, Pod

from .builders import gpu_cluster, reference_manifests, simulation

SETTLE_S = 300  # image pull 60 s + load 60 s, with room to spare


def _pod(sim: Simulation, prefix: str) -> list[Pod]:
    return [p for owner in sim.world.pods.values() for p in owner if p.name.startswith(prefix)]


def test_pdb_allows_one_eviction_then_answers_429() -> None:
    sim = simulation(reference_manifests(), gpu_cluster(), SETTLE_S + 10)
    for t in range(SETTLE_S):
        sim.step(t)
    serving = sorted(_pod(sim, "serve"), key=lambda p: p.name)
    assert [p.phase for p in serving] == [Phase.READY, Phase.READY]
    assert [p.phase for p in _pod(sim, "headroom")] == [Phase.READY]
    status = sim.pdb_status(sim.scenario.pdbs[0])
    # "the PDB reports 2 healthy, 1 desired, 1 disruption allowed"
    assert (status.current_healthy, status.desired_healthy, status.disruptions_allowed) == (2, 1, 1)
    assert sim.evict(serving[0], float(SETTLE_S)) is True
    assert serving[0].phase is Phase.TERMINATING
    assert sim.evict(serving[1], float(SETTLE_S)) is False
    assert sim.refused == [(float(SETTLE_S), serving[1].name, "serve")]
    assert TOO_MANY_REQUESTS == 429
    summary = build_summary(sim.result(), seed=0)
    assert any(f["id"] == "pdb-blocks-eviction" for f in summary["findings"])


def test_surge_preempts_headroom_then_rolls_one_at_a_time() -> None:
    rollout_t = SETTLE_S
    sim = simulation(
        reference_manifests(), gpu_cluster(), 1800, events=(parse_event(f"rollout@{rollout_t}"),)
    )
    result = sim.run()
    history = sim.world.history
    binds = [(t, pod, node) for t, kind, pod, node in history if kind == "bind"]
    gone = {pod: t for t, kind, pod, _ in history if kind == "gone"}
    new = [(t, pod) for t, pod, _ in binds if pod.startswith("serve-r1-")]
    old = sorted(t for pod, t in gone.items() if pod.startswith("serve-r0-"))
    headroom_binds = [t for t, pod, _ in binds if pod.startswith("headroom")]
    # The surge pod preempts the headroom pod, the only lower-priority pod.
    assert any("preempts headroom" in text for _, text in sim.world.log)
    assert len(new) == 2
    assert len(old) == 2
    # Each next new pod binds only once an old pod has fully terminated (its GPU freed).
    assert new[0][0] > rollout_t
    assert new[1][0] >= old[0]
    # The headroom pod re-acquires the last free GPU after the last old pod is gone.
    assert headroom_binds[-1] >= old[1]
    final = {p.name: p.phase for owner in sim.world.pods.values() for p in owner}
    assert sorted(final.values()) == [Phase.READY] * 3
    assert max(result.timeline["gpus_in_use"]) <= 3
    summary = build_summary(result, seed=0)
    assert summary["rollout"]["completed"] is True
    # maxUnavailable 0: a serving replica is never short during the rollout.
    assert summary["rollout"]["max_unavailable_seen"] == 0


def test_without_headroom_or_spare_gpu_the_surge_stays_pending() -> None:
    sim = simulation(
        reference_manifests(replicas=3, with_headroom=False),
        gpu_cluster(),
        1800,
        events=(parse_event(f"rollout@{SETTLE_S}"),),
    )
    summary = build_summary(sim.run(), seed=0)
    rollout = summary["rollout"]
    assert rollout["completed"] is False
    assert rollout["stalled_reason"].startswith("ProgressDeadlineExceeded")
    assert summary["scheduled"] is False
    [stuck] = summary["unschedulable"]
    assert stuck["pod"].startswith("serve-r1-")
    assert stuck["reason"].startswith("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    assert {f["id"] for f in summary["findings"]} >= {"rollout-stalled", "unschedulable"}
