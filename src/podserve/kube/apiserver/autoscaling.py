"""autoscaling group: HorizontalPodAutoscaler v2 bounds the schema does not carry
(`validateHorizontalPodAutoscalerSpec`, `validateBehavior`, `validateScalingRules` in
pkg/apis/autoscaling/validation/validation.go of kubernetes/kubernetes): replica bounds,
stabilization windows in 0..3600 s, policy periods in 1..1800 s, policy values above 0."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from podserve.kube.apiserver.errors import (
    AUTOSCALING_VALIDATION,
    ErrorType,
    FieldError,
    Path,
    items,
    mapping,
    object_label,
)
from podserve.kube.types import Manifest

MAX_STABILIZATION_WINDOW_S = 3600  # MaxStabilizationWindowSeconds
MAX_PERIOD_S = 1800  # MaxPeriodSeconds
_SELECT_POLICIES = ("Disabled", "Max", "Min")


def _rules(obj: str, rules: dict[str, Any], path: Path, source: str) -> Iterator[FieldError]:
    window = rules.get("stabilizationWindowSeconds")
    at = str(path.child("stabilizationWindowSeconds"))
    if isinstance(window, int) and window < 0:
        yield FieldError(
            obj, at, ErrorType.INVALID, window, "must be greater than or equal to zero", source
        )
    if isinstance(window, int) and window > MAX_STABILIZATION_WINDOW_S:
        yield FieldError(
            obj,
            at,
            ErrorType.INVALID,
            window,
            f"must be less than or equal to {MAX_STABILIZATION_WINDOW_S}",
            source,
        )
    select = rules.get("selectPolicy")
    if select is not None and select not in _SELECT_POLICIES:
        yield FieldError(
            obj,
            str(path.child("selectPolicy")),
            ErrorType.INVALID,
            select,
            "must be one of " + ", ".join(f'"{p}"' for p in _SELECT_POLICIES),
            source,
        )
    for i, policy in enumerate(items(rules.get("policies"))):
        policy = mapping(policy)
        base = path.child("policies").index(i)
        period, value = policy.get("periodSeconds"), policy.get("value")
        if isinstance(period, int) and period <= 0:
            yield FieldError(
                obj,
                str(base.child("periodSeconds")),
                ErrorType.INVALID,
                period,
                "must be greater than zero",
                source,
            )
        if isinstance(period, int) and period > MAX_PERIOD_S:
            yield FieldError(
                obj,
                str(base.child("periodSeconds")),
                ErrorType.INVALID,
                period,
                f"must be less than or equal to {MAX_PERIOD_S}",
                source,
            )
        if isinstance(value, int) and value <= 0:
            yield FieldError(
                obj,
                str(base.child("value")),
                ErrorType.INVALID,
                value,
                "must be greater than zero",
                source,
            )


def check_behavior(
    obj: str, behavior: dict[str, Any], path: Path, source: str = AUTOSCALING_VALIDATION
) -> Iterator[FieldError]:
    for direction in ("scaleUp", "scaleDown"):
        rules = behavior.get(direction)
        if isinstance(rules, dict):
            yield from _rules(obj, rules, path.child(direction), source)


def check_autoscaling(manifest: Manifest) -> Iterator[FieldError]:
    if not str(manifest.get("apiVersion", "")).endswith("/v2"):
        return
    obj = object_label(manifest)
    spec = mapping(manifest.get("spec"))
    path = Path("spec")
    low, high = spec.get("minReplicas"), spec.get("maxReplicas")
    # 0 needs the HPAScaleToZero feature gate (alpha, off by default) and an Object or
    # External metric; the lower bound here is the default cluster's.
    if isinstance(low, int) and low < 1:
        yield FieldError(
            obj,
            str(path.child("minReplicas")),
            ErrorType.INVALID,
            low,
            "must be greater than or equal to 1",
            AUTOSCALING_VALIDATION,
        )
    if isinstance(high, int) and high < 1:
        yield FieldError(
            obj,
            str(path.child("maxReplicas")),
            ErrorType.INVALID,
            high,
            "must be greater than 0",
            AUTOSCALING_VALIDATION,
        )
    if isinstance(low, int) and isinstance(high, int) and high < low:
        yield FieldError(
            obj,
            str(path.child("maxReplicas")),
            ErrorType.INVALID,
            high,
            "must be greater than or equal to `minReplicas`",
            AUTOSCALING_VALIDATION,
        )
    behavior = spec.get("behavior")
    if isinstance(behavior, dict):
        yield from check_behavior(obj, behavior, path.child("behavior"))
