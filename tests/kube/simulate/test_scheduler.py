"""The scheduler's filters, messages and preemption."""

from __future__ import annotations

from podserve.kube.simulate.cluster import NodePool, Taint
from podserve.kube.simulate.objects import PodTemplate, Requirement, SpreadConstraint, Toleration
from podserve.kube.simulate.resources import amounts
from podserve.kube.simulate.scheduler import Scheduler, fit_error, tolerates
from podserve.kube.simulate.state import Node, Phase, Pod

GPU = Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule")


def template(**kw: object) -> PodTemplate:
    base: dict[str, object] = dict(
        labels={"app": "m"},
        requests=amounts({"cpu": "1", "nvidia.com/gpu": 1}),
        node_selector={},
        affinity_terms=(),
        tolerations=(),
        spread=(),
        priority=0,
        preempts=True,
        grace_s=30.0,
        pre_stop_s=0.0,
        startup_budget_s=None,
        load_s=0.0,
        model_size_gb=0.0,
        fetches=False,
        shared_cache=False,
        image="i",
        serves=True,
    )
    base.update(kw)
    return PodTemplate(**base)  # type: ignore[arg-type]


def node(
    name: str,
    labels: dict[str, str] | None = None,
    gpus: int = 1,
    taints: tuple[Taint, ...] = (GPU,),
    extra: dict[str, int] | None = None,
) -> Node:
    pool = NodePool(name="p", count=1, allocatable={"cpu": "8"})
    alloc = amounts({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": gpus, **(extra or {})})
    alloc["pods"] = 110
    return Node(
        name, pool, {"kubernetes.io/hostname": name, **(labels or {})}, taints, alloc, 0.0, 0.0
    )


def pod(t: PodTemplate, name: str = "m-0") -> Pod:
    return Pod(name, "m", 0, t, 0.0)


def place(n: Node, p: Pod) -> None:
    n.bind(p)
    p.node = n
    p.phase = Phase.READY


def test_toleration_matching() -> None:
    assert tolerates([Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule")], GPU)
    assert tolerates([Toleration("nvidia.com/gpu", "Equal", "present", "")], GPU)
    assert not tolerates([Toleration("nvidia.com/gpu", "Equal", "other", "")], GPU)
    assert not tolerates([Toleration("sku", "Exists", "", "")], GPU)
    assert tolerates([Toleration("", "Exists", "", "")], GPU)
    assert not tolerates([Toleration("nvidia.com/gpu", "Exists", "", "NoExecute")], GPU)


def test_extended_resource_toleration_is_a_cluster_setting() -> None:
    nodes = [node("a")]
    assert Scheduler(True).schedule(pod(template()), nodes).node is nodes[0]
    decision = Scheduler(False).schedule(pod(template()), nodes)
    assert decision.node is None
    assert decision.message.startswith(
        "0/1 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )


def test_insufficient_gpu_message_counts_nodes() -> None:
    nodes = [node("a", gpus=0), node("b", gpus=0), node("c", gpus=0)]
    decision = Scheduler().schedule(pod(template()), nodes)
    assert decision.message.startswith("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    assert fit_error(3, {"b": 1, "a": 2}) == "0/3 nodes are available: 1 b, 2 a."


def test_selector_and_required_affinity() -> None:
    nodes = [node("a", {"gpu": "a100"}), node("b", {"gpu": "t4"})]
    t = template(node_selector={"gpu": "t4"})
    assert Scheduler().schedule(pod(t), nodes).node is nodes[1]
    t = template(affinity_terms=((Requirement("gpu", "In", ("a100", "h100")),),))
    assert Scheduler().schedule(pod(t), nodes).node is nodes[0]
    t = template(affinity_terms=((Requirement("gpu", "NotIn", ("a100", "t4")),),))
    decision = Scheduler().schedule(pod(t), nodes)
    assert "2 node(s) didn't match Pod's node affinity/selector" in decision.message
    assert "2 Preemption is not helpful for scheduling" in decision.message


def test_mig_resources_are_extended_resources() -> None:
    mig = {"nvidia.com/mig-1g.10gb": 7}
    nodes = [node("a", gpus=0, extra=mig)]
    t = template(
        requests=amounts({"cpu": "1", "nvidia.com/mig-1g.10gb": 1}),
        tolerations=(Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),),
    )
    for i in range(7):
        p = pod(t, f"m-{i}")
        decision = Scheduler().schedule(p, nodes)
        assert decision.node is nodes[0]
        place(nodes[0], p)
    decision = Scheduler().schedule(pod(t, "m-7"), nodes)
    assert "Insufficient nvidia.com/mig-1g.10gb" in decision.message


def test_topology_spread_do_not_schedule() -> None:
    spread = (SpreadConstraint(1, "zone", True, (("app", "m"),)),)
    t = template(spread=spread, requests=amounts({"cpu": "1"}))
    nodes = [node("a", {"zone": "z1"}, taints=()), node("b", {"zone": "z2"}, taints=())]
    place(nodes[0], pod(t, "m-0"))
    # z1 has 1, z2 has 0: a second pod in z1 would make the skew 2.
    assert Scheduler().schedule(pod(t, "m-1"), [nodes[0], nodes[1]]).node is nodes[1]
    nodes[1].cordoned = True
    decision = Scheduler().schedule(pod(t, "m-1"), nodes)
    assert "1 node(s) didn't match pod topology spread constraints" in decision.message
    assert "1 node(s) were unschedulable" in decision.message


def test_preemption_picks_the_lowest_priority_victims_and_respects_never() -> None:
    nodes = [node("a"), node("b")]
    low = template(priority=-10, preempts=False, labels={"app": "headroom"})
    mid = template(priority=5, labels={"app": "other"})
    place(nodes[0], pod(mid, "other-0"))
    place(nodes[1], pod(low, "headroom-0"))
    decision = Scheduler().schedule(pod(template(priority=10)), nodes)
    assert decision.node is None
    assert decision.nominated is nodes[1]
    assert [v.name for v in decision.victims] == ["headroom-0"]
    # A pod with preemptionPolicy Never waits instead.
    decision = Scheduler().schedule(pod(template(priority=10, preempts=False)), nodes)
    assert decision.victims == ()
    assert "preemptionPolicy=Never" in decision.message
    # Equal priority never preempts.
    decision = Scheduler().schedule(pod(template(priority=5)), [nodes[0]])
    assert decision.victims == ()
    assert "1 No preemption victims found for incoming pod" in decision.message
