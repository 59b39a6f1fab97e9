"""apps group: Deployment, ReplicaSet, StatefulSet and DaemonSet cross-field checks
(pkg/apis/apps/validation/validation.go in kubernetes/kubernetes), after the defaults
pkg/apis/apps/v1/defaults.go fills in (a Deployment's rollingUpdate defaults to 25%/25%, a
DaemonSet's to maxUnavailable 1, maxSurge 0): the selector must match the template's labels
and may not be empty, a rolling update must be able to move (maxSurge and maxUnavailable not
both 0), percentages at most 100%; then the core checks of the pod template."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from podserve.kube.apiserver.core import check_pod_spec
from podserve.kube.apiserver.errors import (
    APPS_VALIDATION,
    ErrorType,
    FieldError,
    Path,
    items,
    mapping,
    object_label,
)
from podserve.kube.types import Manifest

_PERCENT = re.compile(r"^[0-9]+%$")


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """metav1.LabelSelectorAsSelector(...).Matches: every matchLabels pair and every
    expression must hold (an empty selector matches everything)."""
    have = {str(k): str(v) for k, v in labels.items()}
    for key, value in mapping(selector.get("matchLabels")).items():
        if have.get(str(key)) != str(value):
            return False
    for expr in items(selector.get("matchExpressions")):
        expr = mapping(expr)
        key, op = str(expr.get("key")), expr.get("operator")
        values = [str(v) for v in items(expr.get("values"))]
        if (
            (op == "In" and have.get(key) not in values)
            or (op == "NotIn" and key in have and have[key] in values)
            or (op == "Exists" and key not in have)
            or (op == "DoesNotExist" and key in have)
        ):
            return False
    return True


def int_or_percent_value(value: Any) -> int:
    """apps validation's getIntOrPercentValue: the number before `%`, or the integer."""
    if isinstance(value, int):
        return value
    text = str(value)
    if _PERCENT.match(text):
        return int(text[:-1])
    return int(text) if text.lstrip("-").isdigit() else 0


def _percent_over_100(obj: str, value: Any, path: Path) -> Iterator[FieldError]:
    if isinstance(value, str) and _PERCENT.match(value) and int(value[:-1]) > 100:
        yield FieldError(
            obj,
            str(path),
            ErrorType.INVALID,
            value,
            "must not be greater than 100%",
            APPS_VALIDATION,
        )


def _selector(obj: str, kind: str, spec: dict[str, Any], path: Path) -> Iterator[FieldError]:
    selector = mapping(spec.get("selector"))
    template_labels = mapping(mapping(mapping(spec.get("template")).get("metadata")).get("labels"))
    if not selector:
        yield FieldError(
            obj, str(path.child("selector")), ErrorType.REQUIRED, None, "", APPS_VALIDATION
        )
        return
    if not mapping(selector.get("matchLabels")) and not items(selector.get("matchExpressions")):
        yield FieldError(
            obj,
            str(path.child("selector")),
            ErrorType.INVALID,
            selector,
            f"empty selector is invalid for {kind.lower()}",
            APPS_VALIDATION,
        )
        return
    if not selector_matches(selector, template_labels):
        yield FieldError(
            obj,
            str(path.child("template", "metadata", "labels")),
            ErrorType.INVALID,
            template_labels,
            "`selector` does not match template `labels`",
            APPS_VALIDATION,
        )


def _deployment_strategy(obj: str, spec: dict[str, Any], path: Path) -> Iterator[FieldError]:
    strategy = mapping(spec.get("strategy"))
    kind = strategy.get("type", "RollingUpdate")
    at = path.child("strategy")
    if kind == "Recreate":
        if strategy.get("rollingUpdate") is not None:
            yield FieldError(
                obj,
                str(at.child("rollingUpdate")),
                ErrorType.FORBIDDEN,
                None,
                "may not be specified when strategy `type` is 'Recreate'",
                APPS_VALIDATION,
            )
        return
    rolling = mapping(strategy.get("rollingUpdate"))
    surge = rolling.get("maxSurge", "25%")
    unavailable = rolling.get("maxUnavailable", "25%")
    ru = at.child("rollingUpdate")
    if int_or_percent_value(unavailable) == 0 and int_or_percent_value(surge) == 0:
        yield FieldError(
            obj,
            str(ru.child("maxUnavailable")),
            ErrorType.INVALID,
            unavailable,
            "may not be 0 when `maxSurge` is 0",
            APPS_VALIDATION,
        )
    yield from _percent_over_100(obj, unavailable, ru.child("maxUnavailable"))


def _daemonset_strategy(obj: str, spec: dict[str, Any], path: Path) -> Iterator[FieldError]:
    strategy = mapping(spec.get("updateStrategy"))
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return
    rolling = mapping(strategy.get("rollingUpdate"))
    unavailable, surge = rolling.get("maxUnavailable", 1), rolling.get("maxSurge", 0)
    ru = path.child("updateStrategy", "rollingUpdate")
    yield from _percent_over_100(obj, unavailable, ru.child("maxUnavailable"))
    yield from _percent_over_100(obj, surge, ru.child("maxSurge"))
    has_unavailable = int_or_percent_value(unavailable) != 0
    has_surge = int_or_percent_value(surge) != 0
    if has_unavailable and has_surge:
        yield FieldError(
            obj,
            str(ru.child("maxSurge")),
            ErrorType.INVALID,
            surge,
            "may not be set when maxUnavailable is non-zero",
            APPS_VALIDATION,
        )
    elif not has_unavailable and not has_surge:
        yield FieldError(
            obj,
            str(ru.child("maxUnavailable")),
            ErrorType.REQUIRED,
            None,
            "cannot be 0 when maxSurge is 0",
            APPS_VALIDATION,
        )


def _statefulset_strategy(obj: str, spec: dict[str, Any], path: Path) -> Iterator[FieldError]:
    rolling = mapping(mapping(spec.get("updateStrategy")).get("rollingUpdate"))
    if "maxUnavailable" not in rolling:
        return
    value = rolling["maxUnavailable"]
    at = path.child("updateStrategy", "rollingUpdate", "maxUnavailable")
    if int_or_percent_value(value) == 0:
        yield FieldError(obj, str(at), ErrorType.INVALID, value, "cannot be 0", APPS_VALIDATION)
    yield from _percent_over_100(obj, value, at)


def check_apps(manifest: Manifest) -> Iterator[FieldError]:
    kind = str(manifest.get("kind"))
    obj = object_label(manifest)
    spec = mapping(manifest.get("spec"))
    path = Path("spec")
    yield from _selector(obj, kind, spec, path)
    if kind == "Deployment":
        yield from _deployment_strategy(obj, spec, path)
        deadline, ready = spec.get("progressDeadlineSeconds"), spec.get("minReadySeconds", 0)
        if isinstance(deadline, int) and isinstance(ready, int) and deadline <= ready:
            yield FieldError(
                obj,
                str(path.child("progressDeadlineSeconds")),
                ErrorType.INVALID,
                deadline,
                "must be greater than minReadySeconds",
                APPS_VALIDATION,
            )
    elif kind == "DaemonSet":
        yield from _daemonset_strategy(obj, spec, path)
    elif kind == "StatefulSet":
        yield from _statefulset_strategy(obj, spec, path)
    pod = mapping(mapping(spec.get("template")).get("spec"))
    yield from check_pod_spec(obj, pod, path.child("template", "spec"))
