"""policy group: a PodDisruptionBudget names minAvailable or maxUnavailable, never both
(`ValidatePodDisruptionBudgetSpec`, pkg/apis/policy/validation/validation.go in
kubernetes/kubernetes); percentages at most 100%, integers not negative."""

from __future__ import annotations

from collections.abc import Iterator

from podserve.kube.apiserver.apps import int_or_percent_value
from podserve.kube.apiserver.errors import (
    POLICY_VALIDATION,
    ErrorType,
    FieldError,
    Path,
    mapping,
    object_label,
)
from podserve.kube.types import Manifest


def check_policy(manifest: Manifest) -> Iterator[FieldError]:
    obj = object_label(manifest)
    spec = mapping(manifest.get("spec"))
    path = Path("spec")
    if "minAvailable" in spec and "maxUnavailable" in spec:
        yield FieldError(
            obj,
            str(path),
            ErrorType.INVALID,
            spec,
            "minAvailable and maxUnavailable cannot be both set",
            POLICY_VALIDATION,
        )
    for name in ("minAvailable", "maxUnavailable"):
        if name not in spec:
            continue
        value = spec[name]
        number = int_or_percent_value(value)
        if isinstance(value, int) and number < 0:
            yield FieldError(
                obj,
                str(path.child(name)),
                ErrorType.INVALID,
                value,
                "must be greater than or equal to 0",
                POLICY_VALIDATION,
            )
        if isinstance(value, str) and value.endswith("%") and number > 100:
            yield FieldError(
                obj,
                str(path.child(name)),
                ErrorType.INVALID,
                value,
                "must not be greater than 100%",
                POLICY_VALIDATION,
            )
