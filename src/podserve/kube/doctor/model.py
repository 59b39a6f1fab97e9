"""The doctor's inputs and outputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from podserve.kube.types import Manifest


@dataclass(frozen=True, slots=True)
class Event:
    reason: str
    message: str
    type: str
    count: int

    def line(self) -> str:
        times = f" (x{self.count})" if self.count > 1 else ""
        return f"event {self.type} {self.reason}{times}: {self.message}"


@dataclass(frozen=True, slots=True)
class PodDump:
    pod: Manifest
    events: tuple[Event, ...]
    logs: tuple[str, ...]

    @property
    def name(self) -> str:
        meta = self.pod.get("metadata") or {}
        return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"

    @property
    def phase(self) -> str:
        return str((self.pod.get("status") or {}).get("phase", ""))

    def container_statuses(self) -> list[Mapping[str, Any]]:
        status = self.pod.get("status") or {}
        return list(status.get("initContainerStatuses") or []) + list(
            status.get("containerStatuses") or []
        )

    def containers(self) -> list[Mapping[str, Any]]:
        spec = self.pod.get("spec") or {}
        return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])

    def annotations(self) -> Mapping[str, str]:
        return (self.pod.get("metadata") or {}).get("annotations") or {}

    def events_where(self, *reasons: str, contains: str = "") -> list[Event]:
        return [
            e
            for e in self.events
            if (not reasons or e.reason in reasons) and contains.lower() in e.message.lower()
        ]

    def log_lines(self, *needles: str) -> list[str]:
        lowered = [n.lower() for n in needles]
        return [line for line in self.logs if any(n in line.lower() for n in lowered)]


@dataclass(frozen=True, slots=True)
class Diagnosis:
    id: str
    title: str
    explanation: str
    evidence: tuple[str, ...]
    fix: tuple[str, ...]
