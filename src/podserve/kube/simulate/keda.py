"""KEDA's ScaledObject loop on an injected clock (kedacore/keda pkg/scaling/scale_handler.go
and pkg/scaling/executor/scale_scaledobjects.go; semantics from keda-docs
content/docs/2.21/reference/scaledobject-spec.md and concepts/scaling-deployments.md):

- every `pollingInterval` the triggers are read; a trigger is active when its value is
  strictly above `activationThreshold`;
- at 0 replicas, activity scales the target to max(minReplicaCount, 1) (activation);
- from 1 to N the HPA KEDA creates (`keda-hpa-<name>`, External AverageValue = threshold,
  min max(1, minReplicaCount)) decides; see hpa.py;
- after no trigger was active for `cooldownPeriod` (and `initialCooldownPeriod` after
  creation), minReplicaCount 0 scales the target to 0;
- `fallback`: after `failureThreshold` consecutive failed reads, the target goes to
  `fallback.replicas` (the static behaviour) until reads succeed again. Since KEDA 2.17 the
  value reaches the target only through the HPA (pkg/fallback/fallback.go
  GetMetricsWithFallback; the executor's own fallback scaling was removed,
  kedacore/keda#6520), and an HPA does nothing to a target at 0 replicas, so a target at
  zero stays there (kedacore/keda#7239)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from podserve.kube.simulate.hpa import HpaController
from podserve.kube.simulate.objects import ScaledObject


@dataclass(slots=True)
class KedaController:
    spec: ScaledObject
    hpa: HpaController
    created_t: float = 0.0
    last_active_t: float | None = None
    failures: int = 0
    next_poll_t: float = 0.0
    fallback_active: bool = False
    last_reason: str = ""

    @classmethod
    def for_spec(cls, spec: ScaledObject, created_t: float = 0.0) -> KedaController:
        hpa = HpaController(max(1, spec.min_replicas), spec.max_replicas, spec.behavior)
        return cls(spec=spec, hpa=hpa, created_t=created_t, next_poll_t=created_t)

    def poll(self, now: float, current: int, values: Sequence[float] | None) -> int | None:
        """One polling cycle; `values` per trigger, None when the scaler failed. Returns the
        replicas to set, or None to leave the 0↔N decision alone (the HPA owns 1..N)."""
        self.next_poll_t = now + self.spec.polling_s
        if values is None:
            self.failures += 1
            threshold = self.spec.fallback_failures
            if threshold is not None and self.failures >= threshold:
                self.fallback_active = True
                if current == 0:
                    # The fallback metric goes to an HPA that is inactive at 0 replicas;
                    # the executor only logs (scale_scaledobjects.go RequestScale).
                    return None
                self.last_reason = "fallback"
                return fallback_replicas(self.spec, current)
            return None
        self.failures = 0
        self.fallback_active = False
        if current < self.spec.min_replicas:
            # Below minReplicaCount the executor scales straight to it.
            self.last_reason = "minReplicaCount"
            return self.spec.min_replicas
        active = any(
            value > trigger.activation
            for value, trigger in zip(values, self.spec.triggers, strict=True)
        )
        if active:
            self.last_active_t = now
            if current == 0:
                self.last_reason = "activation"
                return max(self.spec.min_replicas, 1)
            return None
        if current > 0 and self.spec.min_replicas == 0:
            since = self.last_active_t
            if since is None:
                ready_to_idle = now >= self.created_t + self.spec.initial_cooldown_s
            else:
                ready_to_idle = now >= since + self.spec.cooldown_s
            if ready_to_idle:
                self.last_reason = "cooldown"
                return 0
        return None


def fallback_replicas(spec: ScaledObject, current: int) -> int | None:
    """`fallback.behavior`: static (default), currentReplicas, currentReplicasIfHigher,
    currentReplicasIfLower."""
    replicas = spec.fallback_replicas
    if replicas is None:
        return None
    if spec.fallback_behavior == "currentReplicas":
        return current
    if spec.fallback_behavior == "currentReplicasIfHigher":
        return max(current, replicas)
    if spec.fallback_behavior == "currentReplicasIfLower":
        return min(current, replicas)
    return replicas
