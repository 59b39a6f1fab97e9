"""Golden-set evaluation on a schedule: a CronJob running `podserve eval` against the stable
Service (in-cluster DNS), the suite as a ConfigMap when it is given inline, and a
PrometheusRule alerting on the pass ratio and on runs that stopped arriving."""

from __future__ import annotations

from typing import Any

from podserve.config.model_service import Evaluation, ModelService
from podserve.kube import conventions as c
from podserve.kube.render.pod import container_security, pod_security
from podserve.kube.render.variant import labels, metadata
from podserve.kube.types import Manifest

EVAL_DIR = "/etc/podserve/eval"
SUITE_KEY = "suite.jsonl"
BASELINE_KEY = "baseline.json"
TEXTFILE_MOUNT = "/var/lib/podserve-eval"
# The client sends a few JSON requests at a time: a small, fixed budget.
EVAL_CPU, EVAL_CPU_LIMIT, EVAL_MEMORY = "100m", "1", "256Mi"


def suite_name(service: ModelService) -> str:
    assert service.spec.evaluation is not None
    given = service.spec.evaluation.suite_name
    # Namespace first: one Pushgateway serves many namespaces, and names repeat across them.
    return given or f"{service.metadata.namespace}.{service.metadata.name}"


def suite_config_map_name(service: ModelService, evaluation: Evaluation) -> str:
    return evaluation.suite_config_map or f"{service.metadata.name}-eval-suite"


def service_url(service: ModelService) -> str:
    return f"http://{service.metadata.name}.{service.metadata.namespace}.svc:{c.HTTP_PORT}"


def _args(service: ModelService, evaluation: Evaluation) -> list[str]:
    args = [
        "eval",
        f"{EVAL_DIR}/suite/{SUITE_KEY}",
        "--url",
        service_url(service),
        "--suite",
        suite_name(service),
        "--concurrency",
        str(evaluation.concurrency),
        "--timeout-s",
        f"{evaluation.timeout_seconds:g}",
        "--min-pass-ratio",
        f"{evaluation.min_pass_ratio:g}",
    ]
    if evaluation.baseline_config_map is not None:
        args += [
            "--baseline",
            f"{EVAL_DIR}/baseline/{BASELINE_KEY}",
            "--max-drop",
            f"{evaluation.max_drop:g}",
        ]
    if evaluation.pushgateway is not None:
        args += ["--pushgateway", evaluation.pushgateway]
    if evaluation.textfile_dir is not None:
        args += ["--textfile", f"{TEXTFILE_MOUNT}/podserve_eval_{service.metadata.name}.prom"]
    return args


def _pod(service: ModelService, evaluation: Evaluation) -> dict[str, Any]:
    image = service.spec.image
    mounts = [
        {"name": "suite", "mountPath": f"{EVAL_DIR}/suite", "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes: list[dict[str, Any]] = [
        {
            "name": "suite",
            "configMap": {
                "name": suite_config_map_name(service, evaluation),
                "items": [{"key": SUITE_KEY, "path": SUITE_KEY}],
            },
        },
        {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
    ]
    if evaluation.baseline_config_map is not None:
        mounts.append({"name": "baseline", "mountPath": f"{EVAL_DIR}/baseline", "readOnly": True})
        volumes.append(
            {
                "name": "baseline",
                "configMap": {
                    "name": evaluation.baseline_config_map,
                    "items": [{"key": BASELINE_KEY, "path": BASELINE_KEY}],
                },
            }
        )
    if evaluation.textfile_dir is not None:
        mounts.append({"name": "textfile", "mountPath": TEXTFILE_MOUNT})
        volumes.append(
            {
                "name": "textfile",
                "hostPath": {"path": evaluation.textfile_dir, "type": "DirectoryOrCreate"},
            }
        )
    container = {
        "name": "eval",
        "image": image.ref,
        "imagePullPolicy": image.pull_policy,
        "command": ["podserve"],
        "args": _args(service, evaluation),
        "resources": {
            "requests": {"cpu": EVAL_CPU, "memory": EVAL_MEMORY},
            "limits": {"cpu": EVAL_CPU_LIMIT, "memory": EVAL_MEMORY},
        },
        "securityContext": container_security(),
        "volumeMounts": mounts,
    }
    return {
        "restartPolicy": "Never",
        "serviceAccountName": service.metadata.name,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security(),
        "containers": [container],
        "volumes": volumes,
    }


def eval_cron_job(service: ModelService, evaluation: Evaluation) -> Manifest:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": metadata(service, f"{service.metadata.name}-eval", "eval"),
        "spec": {
            "schedule": evaluation.schedule,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "spec": {
                    # A regression must not be retried until it passes by chance; the next
                    # scheduled run is the retry.
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": evaluation.deadline_seconds,
                    "template": {
                        "metadata": {"labels": labels(service, "eval")},
                        "spec": _pod(service, evaluation),
                    },
                }
            },
        },
    }


def suite_config_map(service: ModelService, evaluation: Evaluation) -> Manifest:
    assert evaluation.suite is not None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(service, suite_config_map_name(service, evaluation), "eval"),
        "data": {SUITE_KEY: evaluation.suite},
    }


def eval_rule(service: ModelService, evaluation: Evaluation) -> Manifest:
    name, suite = service.metadata.name, suite_name(service)
    rules = [
        {
            "alert": "PodserveEvalRegression",
            "expr": (
                f'min(podserve_eval_pass_ratio{{suite="{suite}",tag="all"}}) '
                f"< {evaluation.min_pass_ratio:g}"
            ),
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": f"{name}: golden set {suite} passes below "
                f"{evaluation.min_pass_ratio:.0%}",
                "description": "The last `podserve eval` run failed cases that should pass; "
                "its Job log names them (kubectl logs job/<the failed run>).",
            },
        },
        {
            "alert": "PodserveEvalStale",
            "expr": (
                f'time() - max(podserve_eval_last_run_timestamp_seconds{{suite="{suite}"}}) '
                f"> {evaluation.stale_after_seconds}"
            ),
            "for": "10m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"{name}: no golden-set run of {suite} reported for "
                f"{evaluation.stale_after_seconds}s (CronJob {name}-eval failing or "
                "the endpoint unreachable)",
            },
        },
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata(service, f"{name}-eval", "eval"),
        "spec": {"groups": [{"name": f"{name}.eval", "rules": rules}]},
    }


def eval_objects(service: ModelService) -> list[Manifest]:
    evaluation = service.spec.evaluation
    if evaluation is None:
        return []
    result = []
    if evaluation.suite is not None:
        result.append(suite_config_map(service, evaluation))
    result.append(eval_cron_job(service, evaluation))
    if evaluation.alerts:
        result.append(eval_rule(service, evaluation))
    return result
