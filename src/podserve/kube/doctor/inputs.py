"""Reading the doctor's inputs: `kubectl get pod -o yaml` (a Pod or a List of them),
`kubectl get events -o yaml` (core/v1 or events.k8s.io/v1) and plain log text — from files,
or live through kubectl behind a one-function seam that tests replace."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

import yaml

from podserve.core.errors import InvalidInput
from podserve.kube.doctor.model import Event, PodDump
from podserve.kube.types import Manifest

Runner = Callable[[Sequence[str]], str]


def parse_pods(text: str) -> list[Manifest]:
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise InvalidInput("the pod dump must be `kubectl get pod -o yaml` output")
    items = data.get("items") if data.get("kind", "").endswith("List") else [data]
    pods = [item for item in items or [] if isinstance(item, dict) and item.get("kind") == "Pod"]
    if not pods:
        raise InvalidInput("no Pod in the pod dump")
    return pods


def _event(item: dict[str, Any]) -> tuple[str, Event]:
    involved = item.get("involvedObject") or item.get("regarding") or {}
    message = str(item.get("message") or item.get("note") or "").strip()
    count = item.get("count") or (item.get("series") or {}).get("count") or 1
    return str(involved.get("name", "")), Event(
        reason=str(item.get("reason", "")),
        message=" ".join(message.split()),
        type=str(item.get("type", "Normal")),
        count=int(count),
    )


def parse_events(text: str) -> list[tuple[str, Event]]:
    data = yaml.safe_load(text) or {}
    items = data.get("items", []) if isinstance(data, dict) else data
    return [_event(item) for item in items or [] if isinstance(item, dict)]


def dumps(pods_text: str, events_text: str | None, logs_text: str | None) -> list[PodDump]:
    events = parse_events(events_text) if events_text else []
    logs = tuple(logs_text.splitlines()) if logs_text else ()
    result = []
    for pod in parse_pods(pods_text):
        name = (pod.get("metadata") or {}).get("name")
        mine = tuple(e for owner, e in events if owner in {name, ""})
        result.append(PodDump(pod=pod, events=mine, logs=logs))
    return result


def kubectl_runner(args: Sequence[str]) -> str:
    completed = subprocess.run(
        ["kubectl", *args], capture_output=True, text=True, check=False, timeout=60
    )
    if completed.returncode != 0:
        raise InvalidInput(f"kubectl {' '.join(args)} failed: {completed.stderr.strip()}")
    return completed.stdout


def kubectl_available() -> bool:
    return shutil.which("kubectl") is not None


def live_dump(pod: str, namespace: str, run: Runner = kubectl_runner) -> list[PodDump]:
    pods = run(["get", "pod", pod, "-n", namespace, "-o", "yaml"])
    events = run(
        [
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            f"involvedObject.name={pod}",
            "-o",
            "yaml",
        ]
    )
    logs = []
    for previous in (True, False):
        try:
            flag = ["--previous"] if previous else []
            logs.append(
                run(["logs", pod, "-n", namespace, "--all-containers", "--tail", "500", *flag])
            )
        except InvalidInput:
            continue  # no previous container, or not started yet: the other dump suffices
    return dumps(pods, events, "\n".join(logs))
