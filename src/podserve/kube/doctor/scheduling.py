"""Pods that never start: no free GPU, untolerated taints, images that cannot be pulled."""

from __future__ import annotations

import re

from podserve.kube.doctor.model import Diagnosis, PodDump

_INSUFFICIENT = re.compile(r"Insufficient ([a-z0-9.-]+/[a-z0-9._-]+)")
_TAINT = re.compile(r"(?:untolerated taint|had taint)s?\(?s?\)?\s*\{([^}]*)\}")


def insufficient_gpu(dump: PodDump) -> Diagnosis | None:
    if dump.phase != "Pending":
        return None
    events = [
        e
        for e in dump.events_where("FailedScheduling", "NotTriggerScaleUp")
        if _INSUFFICIENT.search(e.message)
    ]
    conditions = [
        f"condition PodScheduled=False: {c.get('message')}"
        for c in (dump.pod.get("status") or {}).get("conditions") or []
        if c.get("type") == "PodScheduled" and _INSUFFICIENT.search(str(c.get("message", "")))
    ]
    if not events and not conditions:
        return None
    text = " ".join(e.message for e in events) + " ".join(conditions)
    resources = sorted(set(_INSUFFICIENT.findall(text)))
    gpu = [r for r in resources if "gpu" in r or "/mig-" in r] or resources
    selector = (dump.pod.get("spec") or {}).get("nodeSelector") or {}
    checks = [
        "The device plugin runs on every GPU node: `kubectl get ds -A | grep -i "
        "nvidia-device-plugin` (or the GPU operator's pods) — without it nodes advertise no "
        f"{gpu[0]}.",
        f"Nodes advertise it: `kubectl get nodes -o custom-columns=NAME:.metadata.name,"
        f"GPU:.status.allocatable.{gpu[0].replace('.', chr(92) + '.')}`; a node whose devices "
        "are all requested has none free (look for Pending pods and GPU headroom).",
    ]
    if selector:
        pairs = [f"{k}={v}" for k, v in sorted(selector.items())]
        checks.append(
            f"Nodes carry the selected labels ({', '.join(pairs)}): `kubectl get "
            f"nodes -l {','.join(pairs)}` — a typo in a product label matches "
            "nothing."
        )
    checks += [
        f"The namespace quota leaves room: `kubectl describe resourcequota` (requests.{gpu[0]}).",
        "The cluster autoscaler can add a GPU node (node-pool max size, cloud GPU quota); "
        "its NotTriggerScaleUp events say why not.",
        "MIG resources (nvidia.com/mig-*) exist only where the MIG strategy exposes them; "
        "whole-GPU requests do not match MIG-partitioned nodes.",
    ]
    return Diagnosis(
        id="insufficient-gpu",
        title=f"Pending: no schedulable node has a free {gpu[0]}",
        explanation="The scheduler found no node with enough unrequested devices of the "
        "requested kind among the nodes the pod's selector and tolerations allow.",
        evidence=tuple([e.line() for e in events] + conditions),
        fix=tuple(checks),
    )


def untolerated_taint(dump: PodDump) -> Diagnosis | None:
    if dump.phase != "Pending":
        return None
    events = dump.events_where("FailedScheduling", contains="taint")
    taints = sorted({t.strip() for e in events for t in _TAINT.findall(e.message)})
    if not events or not taints:
        return None
    tolerated = {str(t.get("key")) for t in (dump.pod.get("spec") or {}).get("tolerations") or []}
    missing = [t for t in taints if t.split(":")[0].strip() not in tolerated]
    fixes = [
        f"Add a toleration for {t} if the pod belongs on those nodes, e.g. "
        f"`{{key: {t.split(':')[0].strip()}, operator: Exists, effect: NoSchedule}}`."
        for t in missing or taints
    ]
    fixes.append(
        "A toleration only permits those nodes: keep a nodeSelector on a GPU label "
        "so the pod does not land on the wrong pool."
    )
    return Diagnosis(
        id="untolerated-taint",
        title="Pending: the candidate nodes carry taints the pod does not tolerate",
        explanation="GPU, spot and system pools are tainted so that only pods that ask for "
        "them land there; this pod does not tolerate " + ", ".join(missing or taints) + ".",
        evidence=tuple(e.line() for e in events),
        fix=tuple(fixes),
    )


def image_pull(dump: PodDump) -> Diagnosis | None:
    waiting = [
        (s.get("name"), (s.get("state") or {}).get("waiting") or {})
        for s in dump.container_statuses()
    ]
    stuck = [
        (n, w)
        for n, w in waiting
        if w.get("reason") in {"ImagePullBackOff", "ErrImagePull", "InvalidImageName"}
    ]
    events = dump.events_where("Failed", contains="pull") + dump.events_where(
        "BackOff", contains="image"
    )
    if not stuck and not events:
        return None
    text = " ".join([e.message for e in events] + [str(w.get("message", "")) for _, w in stuck])
    lowered = text.lower()
    if "not found" in lowered or "manifest unknown" in lowered:
        cause = "The tag or digest does not exist in the registry (typo, or never pushed)."
        fix = "Check the reference with `crane digest IMAGE` / `docker manifest inspect IMAGE`."
    elif any(w in lowered for w in ("unauthorized", "denied", "forbidden", "authentication")):
        cause = "The registry refused the node's credentials."
        fix = (
            "Add an imagePullSecret (or node/workload identity) with pull access to the repository."
        )
    elif any(w in lowered for w in ("timeout", "deadline", "i/o", "connection")):
        cause = "The node could not reach the registry, or a multi-GB image pull timed out."
        fix = (
            "Check egress to the registry, use a mirror in the cluster's region, keep "
            "weights out of the image and pre-pull it (podserve coldStart.prePull)."
        )
    else:
        cause = "The image could not be pulled."
        fix = "Read the event message above; check the reference and the pull credentials."
    return Diagnosis(
        id="image-pull",
        title="The image cannot be pulled",
        explanation=cause,
        evidence=tuple(
            [f"container {n} waiting: {w.get('reason')}: {w.get('message', '')}" for n, w in stuck]
            + [e.line() for e in events]
        ),
        fix=(fix, "Pin the image by digest so every node pulls the same bytes."),
    )
