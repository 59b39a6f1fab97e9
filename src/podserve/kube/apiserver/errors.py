"""A field error as the API server words it: `<path>: <type>: <value>: <detail>`.

apimachinery's `field.Error.Error()` (k8s.io/apimachinery/pkg/util/validation/field/errors.go)
prints the path, the error type ("Invalid value", "Required value", "Forbidden", ...), the
bad value for the types that carry one (numbers and bools bare, strings quoted, a
`resource.Quantity` through its String()), then the detail. Structs it prints with Go's
`%#v`, which has no Python equivalent; those values are shown as compact JSON here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any

from podserve.kube.types import Manifest, Severity

K8S = "https://github.com/kubernetes/kubernetes/blob/master/"
CORE_VALIDATION = K8S + "pkg/apis/core/validation/validation.go"
APPS_VALIDATION = K8S + "pkg/apis/apps/validation/validation.go"
POLICY_VALIDATION = K8S + "pkg/apis/policy/validation/validation.go"
AUTOSCALING_VALIDATION = K8S + "pkg/apis/autoscaling/validation/validation.go"
KEDA_WEBHOOK = "https://github.com/kedacore/keda/blob/main/apis/keda/v1alpha1/scaledobject_types.go"
KUBELET_PROBER = K8S + "pkg/kubelet/prober/prober.go"
CEL_VALIDATION = (
    "https://github.com/kubernetes/apiextensions-apiserver/blob/master/"
    "pkg/apiserver/schema/cel/validation.go"
)


class ErrorType(StrEnum):
    INVALID = "Invalid value"
    REQUIRED = "Required value"
    FORBIDDEN = "Forbidden"
    DUPLICATE = "Duplicate value"
    NOT_FOUND = "Not found"
    # Not a field error: an admission webhook's denial, `value` names the webhook.
    WEBHOOK = "denied"


class Quantity:
    """A quantity shown the way `resource.Quantity.String()` does for the common forms:
    whole numbers bare, fractions of a plain number in milli-units, suffixed values as
    written (they are already canonical for the values manifests carry)."""

    __slots__ = ("text",)

    def __init__(self, raw: Any, value: Decimal | None) -> None:
        text = str(raw)
        if value is not None and text.replace(".", "", 1).isdigit():
            if value == value.to_integral_value():
                text = str(int(value))
            elif (value * 1000) == (value * 1000).to_integral_value():
                text = f"{int(value * 1000)}m"
        self.text = text

    def __str__(self) -> str:
        return self.text


# No value shown: the field errors of these types carry none (field/errors.go ErrorBody).
_NO_VALUE = {ErrorType.REQUIRED, ErrorType.FORBIDDEN}


def show_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | Quantity):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if value is None:
        return "null"
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem the API server (or an admission webhook, or the kubelet) would report."""

    object: str  # Kind/namespace/name
    path: str
    type: ErrorType
    value: Any
    detail: str
    source: str  # the upstream code that produces the message
    severity: Severity = Severity.ERROR

    @property
    def body(self) -> str:
        """The text after the path: `Invalid value: 0: may not be 0 when ...`."""
        if self.type is ErrorType.WEBHOOK:
            return f'admission webhook "{self.value}" denied the request: {self.detail}'
        if self.type in _NO_VALUE:
            return f"{self.type.value}: {self.detail}" if self.detail else self.type.value
        body = f"{self.type.value}: {show_value(self.value)}"
        return f"{body}: {self.detail}" if self.detail else body

    @property
    def message(self) -> str:
        """The server's text for this field, e.g. `spec.x: Invalid value: 0: may not be 0`
        (a webhook's denial names no field)."""
        if self.type is ErrorType.WEBHOOK or not self.path:
            return self.body
        return f"{self.path}: {self.body}"

    def __str__(self) -> str:
        return f"{self.object}: {self.message}"


class Path:
    """field.Path: `.Child(name)`, `.Index(i)` → `[i]`, `.Key(k)` → `[k]`."""

    __slots__ = ("text",)

    def __init__(self, text: str = "") -> None:
        self.text = text

    def child(self, *names: str) -> Path:
        text = self.text
        for name in names:
            text = f"{text}.{name}" if text else name
        return Path(text)

    def index(self, i: int) -> Path:
        return Path(f"{self.text}[{i}]")

    def key(self, k: str) -> Path:
        return Path(f"{self.text}[{k}]")

    def __str__(self) -> str:
        return self.text


def object_label(manifest: Manifest) -> str:
    meta = mapping(manifest.get("metadata"))
    namespace, name = meta.get("namespace"), meta.get("name", "?")
    prefix = f"{manifest.get('kind', '?')}/"
    return prefix + (f"{namespace}/{name}" if namespace else str(name))


def mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
