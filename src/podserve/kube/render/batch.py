"""Batch inference: a Job (or a CronJob on a schedule) in the server image, with the same
GPU, cache and fetch as serving. Batch may use spot capacity: a reclaimed pod ends with a
DisruptionTarget condition, which the pod failure policy ignores instead of counting it
against backoffLimit."""

from __future__ import annotations

from typing import Any

from podserve.config.model_service import BatchJob, ModelService
from podserve.kube.plan import Plan
from podserve.kube.render.checkov import checkov_skips, fetch_lint_ignores, fetch_pod_reasons
from podserve.kube.render.placement import (
    gpu_tolerations,
    node_affinity,
    node_selector,
    spot_tolerations,
)
from podserve.kube.render.pod import (
    container_security,
    fetch_steps,
    identity_labels,
    pod_annotations,
    pod_security,
    resources,
    volumes,
)
from podserve.kube.render.variant import labels, metadata
from podserve.kube.types import Manifest

# Enough to flush a partial output file on SIGTERM, and within every provider's 30 s notice.
BATCH_GRACE_S = 25


def _job_spec(service: ModelService, plan: Plan, job: BatchJob) -> dict[str, Any]:
    spec = service.spec
    image = spec.image
    container = {
        "name": "batch",
        "image": image.ref,
        "imagePullPolicy": image.pull_policy,
        "command": list(job.command),
        "resources": resources(service, plan),
        "securityContext": container_security(),
        "volumeMounts": [
            {"name": "cache", "mountPath": "/cache"},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": service.metadata.name,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": BATCH_GRACE_S,
        "securityContext": pod_security(),
        "initContainers": fetch_steps(service, spec.model, image),
        "containers": [container],
        "volumes": volumes(service, plan, with_config=False),
    }
    selector = node_selector(spec)
    if selector:
        pod["nodeSelector"] = selector
    tolerations = gpu_tolerations(spec)
    if job.spot:
        tolerations += spot_tolerations(plan.spot)
    affinity = node_affinity(spec, plan.spot, prefer_spot=True if job.spot else None)
    if affinity:
        pod["affinity"] = affinity
    if tolerations:
        pod["tolerations"] = tolerations
    if spec.cache.kind == "pvc" and spec.workload == "StatefulSet":
        # Per-replica claims belong to the StatefulSet; a Job downloads into its own space.
        pod["volumes"].insert(0, {"name": "cache", "emptyDir": {}})
    body: dict[str, Any] = {
        "parallelism": job.parallelism,
        "completions": job.completions,
        "backoffLimit": job.backoff_limit,
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
            ]
        },
    }
    # A hung run otherwise holds its GPUs forever, and under concurrencyPolicy Forbid its
    # CronJob never starts another.
    body["activeDeadlineSeconds"] = job.active_deadline_seconds
    body["template"] = {
        "metadata": {
            "labels": {**labels(service, "batch"), **identity_labels(service)},
            "annotations": pod_annotations(service, spec.model),
        },
        "spec": pod,
    }
    return body


def _annotations(service: ModelService) -> dict[str, str]:
    return {**checkov_skips(fetch_pod_reasons(service)), **fetch_lint_ignores(service)}


def batch_objects(service: ModelService, plan: Plan) -> list[Manifest]:
    result: list[Manifest] = []
    for job in service.spec.batch:
        name = f"{service.metadata.name}-{job.name}"
        if job.schedule is None:
            result.append(
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": metadata(service, name, "batch", None, _annotations(service)),
                    "spec": _job_spec(service, plan, job),
                }
            )
        else:
            result.append(
                {
                    "apiVersion": "batch/v1",
                    "kind": "CronJob",
                    "metadata": metadata(service, name, "batch", None, _annotations(service)),
                    "spec": {
                        "schedule": job.schedule,
                        "concurrencyPolicy": "Forbid",
                        "successfulJobsHistoryLimit": 3,
                        "failedJobsHistoryLimit": 3,
                        "jobTemplate": {"spec": _job_spec(service, plan, job)},
                    },
                }
            )
    return result
