"""Queue consumers (`podserve consume` from a Redis stream) and their KEDA scaler: the
mistakes that lose, repeat or strand work.

A consumer is a container whose arguments start with `consume` (the podserve command);
its flags are read as `podserve consume` parses them (cli/consume.py). KEDA semantics from
kedacore/keda-docs content/docs/2.11/scalers/redis-streams.md: only `lagCount` reads a value
that grows while no consumer runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from podserve.kube import conventions as c
from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import Container, PodView
from podserve.kube.types import Severity

DEFAULT_GRACE_S = 30  # the pod's terminationGracePeriodSeconds when unset
DEFAULT_DRAIN_S = 25.0  # `podserve consume --drain-timeout-s` default
DEFAULT_BLOCK_MS = 1000  # `--block-ms` default


def _flag(args: Sequence[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
    return None


def _args(ctr: Container) -> list[str]:
    return [str(a) for a in [*(ctr.spec.get("command") or []), *(ctr.spec.get("args") or [])]]


def consumers(ctx: LintContext) -> Iterator[tuple[PodView, Container, list[str]]]:
    for pod in ctx.pods:
        for ctr in pod.containers():
            args = _args(ctr)
            if "consume" in args[:2]:  # `podserve consume` or args [consume, ...]
                yield pod, ctr, args


def _no_dead_letter(ctx: LintContext) -> Iterator[Hit]:
    for pod, ctr, args in consumers(ctx):
        failures = _flag(args, "--max-failures")
        if failures == "0":
            yield Hit(
                pod.document,
                f"{ctr.path}.args",
                f"container {ctr.name} runs `--max-failures 0`: an entry that always fails "
                "is retried for ever",
            )
        elif _flag(args, "--dead-letter-stream") is None:
            yield Hit(
                pod.document,
                f"{ctr.path}.args",
                f"container {ctr.name} names no --dead-letter-stream: failed entries go to "
                "the default `<stream>:dead`, which nothing is declared to read or alert on",
            )


CONSUMER_NO_DEAD_LETTER = Rule(
    id="consumer-no-dead-letter",
    severity=Severity.WARNING,
    title="Queue consumer without a dead-letter stream",
    why="An entry that fails every time (a malformed tensor the model rejects with a 500, a "
    "request that crashes a runtime) is left pending and claimed again after every idle "
    "timeout: without a dead-letter stream it is retried for ever, costs a model call each "
    "time, and its caller never gets an answer. With one, it is moved aside after N "
    "failures with its error, answered with that error, and visible to whoever reads the "
    "dead-letter stream.",
    fix="Set `async.deadLetterStream` in the ModelService (rendered as "
    "`--dead-letter-stream NAME --max-failures N`), and alert on "
    "podserve_consumer_dead_lettered_total.",
    check=_no_dead_letter,
)


def _grace_s(pod: PodView) -> int:
    value = pod.pod.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
    return value if isinstance(value, int) else DEFAULT_GRACE_S


def _number(text: str | None, default: float) -> float:
    try:
        return float(text) if text is not None else default
    except ValueError:
        return default


def _grace_short(ctx: LintContext) -> Iterator[Hit]:
    for pod, _ctr, args in consumers(ctx):
        grace = _grace_s(pod)
        drain = _number(_flag(args, "--drain-timeout-s"), DEFAULT_DRAIN_S)
        block_s = _number(_flag(args, "--block-ms"), DEFAULT_BLOCK_MS) / 1000
        longest = _number(pod.annotations.get(c.LONGEST_REQUEST_SECONDS), 0.0)
        # Up to two batches are in flight (one running, one formed behind it), after the
        # read in progress returns.
        batch_s = math.ceil(block_s + 2 * longest)
        path = f"{pod.pod_path}.terminationGracePeriodSeconds"
        if longest and grace < batch_s:
            yield Hit(
                pod.document,
                path,
                f"grace period {grace}s is shorter than the entries in flight need "
                f"({block_s:g}s read + 2 x {longest:g}s batches = {batch_s}s)",
            )
        elif grace <= drain:
            yield Hit(
                pod.document,
                path,
                f"grace period {grace}s does not outlast --drain-timeout-s {drain:g}: SIGKILL "
                "comes before the consumer gives up on its entries",
            )


CONSUMER_GRACE_SHORT = Rule(
    id="consumer-grace-short",
    severity=Severity.ERROR,
    title="Queue consumer's grace period shorter than its work in flight",
    why="On SIGTERM (a scale-down, a rollout, a spot reclaim) a consumer stops reading and "
    "finishes the entries it claimed. If the kubelet's SIGKILL comes first, those entries "
    "stay pending until another consumer claims them after the idle timeout: their "
    "latency doubles and their batches run twice, on every scale-down KEDA makes.",
    fix="Leave `async.graceSeconds` unset (rendered: two batches of "
    "serving.longestRequestSeconds plus margin), or set it above that and above "
    "--drain-timeout-s.",
    check=_grace_short,
)


def _pending_no_wake(ctx: LintContext) -> Iterator[Hit]:
    for doc in ctx.of_kind("ScaledObject"):
        spec = doc.manifest.get("spec") or {}
        floor = spec.get("minReplicaCount", 0)
        if floor != 0:
            continue
        triggers: list[Mapping[str, Any]] = [
            t for t in spec.get("triggers") or [] if isinstance(t, Mapping)
        ]
        pending = [
            i
            for i, t in enumerate(triggers)
            if t.get("type") in ("redis-streams", "redis-cluster-streams")
            and (t.get("metadata") or {}).get("consumerGroup")
            and "lagCount" not in (t.get("metadata") or {})
        ]
        if triggers and len(pending) == len(triggers):
            yield Hit(
                doc,
                f"spec.triggers[{pending[0]}].metadata",
                "at 0 replicas the group's pending entries stay 0 (nothing reads), so this "
                "trigger never wakes the consumers; use lagCount",
            )


REDIS_STREAMS_PENDING_NO_WAKE = Rule(
    id="redis-streams-pending-no-wake",
    severity=Severity.ERROR,
    title="Scale-to-zero on a stream's pending entries",
    why="KEDA's redis-streams scaler with a consumerGroup and no lagCount reads the group's "
    "pending entries list: entries delivered to a consumer and not yet acknowledged. With "
    "no consumer running nothing is delivered, so the count stays 0 however long the "
    "stream grows, and a ScaledObject at minReplicaCount 0 never activates. KEDA's docs "
    "say so: lag is the only mode that scales from zero.",
    fix="Use `lagCount` with `activationLagCount` (ModelService `async.scaleOn: lag`, "
    "Redis 7+), or keep minReplicaCount at 1.",
    check=_pending_no_wake,
)
