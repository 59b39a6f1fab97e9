"""Every doctor check, in the order a pod meets the problems (scheduling, pulling,
starting, serving)."""

from __future__ import annotations

from collections.abc import Callable

from podserve.kube.doctor.crashes import liveness_during_load, oom_killed
from podserve.kube.doctor.model import Diagnosis, PodDump
from podserve.kube.doctor.scheduling import image_pull, insufficient_gpu, untolerated_taint
from podserve.kube.doctor.serving import cuda_oom, readiness_never

Check = Callable[[PodDump], Diagnosis | None]

ALL_CHECKS: tuple[Check, ...] = (
    insufficient_gpu,
    untolerated_taint,
    image_pull,
    liveness_during_load,
    oom_killed,
    cuda_oom,
    readiness_never,
)


def diagnose(dump: PodDump, checks: tuple[Check, ...] = ALL_CHECKS) -> list[Diagnosis]:
    return [found for check in checks if (found := check(dump)) is not None]
