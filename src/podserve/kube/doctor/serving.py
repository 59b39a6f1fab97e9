"""Pods that run but do not serve: CUDA out of memory under load, readiness never passing."""

from __future__ import annotations

from podserve.kube import conventions as c
from podserve.kube.doctor.model import Diagnosis, PodDump

_CUDA_OOM = (
    "cuda out of memory",
    "outofmemoryerror",
    "cublas_status_alloc_failed",
    "cudaerrormemoryallocation",
    "hip out of memory",
    "out of memory on device",
)


def cuda_oom(dump: PodDump) -> Diagnosis | None:
    lines = dump.log_lines(*_CUDA_OOM)
    if not lines:
        return None
    return Diagnosis(
        id="cuda-oom",
        title="CUDA out of memory under load",
        explanation="The GPU ran out of memory serving requests: too many sequences or too "
        "long contexts at once for the KV cache and activations left after the weights.",
        evidence=tuple(f"log: {line}" for line in lines[-5:]),
        fix=(
            "Cap concurrency: lower spec.serving.maxConcurrentSequences "
            "(PODSERVE_MAX_CONCURRENT_SEQUENCES) so admission queues instead of crashing.",
            "Cap context: lower spec.serving.maxContextTokens (PODSERVE_MAX_CONTEXT_TOKENS); "
            "over-long requests get 400 before they cost memory.",
            "Or give the model more device memory: a larger GPU or MIG profile, or "
            "tensor parallelism over more devices.",
        ),
    )


def readiness_never(dump: PodDump) -> Diagnosis | None:
    if dump.phase != "Running":
        return None
    statuses = (dump.pod.get("status") or {}).get("containerStatuses") or []
    unready = [s for s in statuses if not s.get("ready") and (s.get("state") or {}).get("running")]
    failed = dump.events_where("Unhealthy", contains="readiness")
    if not unready or not failed:
        return None
    text = " ".join(e.message for e in failed).lower()
    if "connection refused" in text:
        cause = (
            "Nothing listens on the probed port: the server binds 127.0.0.1 (set "
            "PODSERVE_HOST=0.0.0.0, the image default) or another port than the probe's."
        )
    elif "statuscode: 404" in text:
        cause = f"The probe asks a path the server does not have (podserve: {c.READINESS_PATH})."
    elif "statuscode: 503" in text:
        cause = (
            "The server answers 503 on readiness: it is still loading, overloaded (queue "
            "above the high watermark), draining, or saw a device error."
        )
    elif "timeout" in text or "deadline" in text:
        cause = (
            "The readiness endpoint does not answer within timeoutSeconds: the event "
            "loop is blocked (inference on the loop) or the pod is CPU-throttled."
        )
    else:
        cause = "The readiness probe keeps failing."
    return Diagnosis(
        id="readiness-never",
        title="Running but never Ready",
        explanation=cause,
        evidence=tuple(
            [f"container {s.get('name')}: ready=false, started={s.get('started')}" for s in unready]
            + [e.line() for e in failed]
        ),
        fix=(
            f"Ask the server why: `kubectl port-forward POD 8000` then `curl -s "
            f"localhost:8000{c.READINESS_PATH}` lists every failing reason as JSON.",
            "Check the probe's port and path match the container (http 8000, /ready) and "
            "that its timeoutSeconds leaves room under load.",
            "If the queue is full, scale out (queue-depth autoscaling) or raise maxQueue.",
        ),
    )
