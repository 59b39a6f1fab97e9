"""What every section of the `ModelService` spec shares: the strict pydantic base with
camelCase aliases, Kubernetes quantity parsing, and the name and digest patterns."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
)
from pydantic.alias_generators import to_camel

# Kubernetes quantity syntax (k8s.io/apimachinery resource.Quantity), kept to the forms a
# person writes: a decimal number with an optional binary or decimal suffix.
_QUANTITY = re.compile(r"^(?P<num>[0-9]+(\.[0-9]+)?)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_FACTORS = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_DIGEST = r"^sha256:[0-9a-f]{64}$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"


def quantity_value(text: str) -> Decimal:
    """The numeric value of a quantity (`"64Gi"` → bytes, `"500m"` → 0.5)."""
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity such as 500m, 4, 16Gi")
    return Decimal(match["num"]) * _FACTORS[match["suffix"] or ""]


def _check_quantity(text: str) -> str:
    quantity_value(text)
    return text


Quantity = Annotated[str, AfterValidator(_check_quantity)]


class _Spec(BaseModel):
    """camelCase keys in YAML, like every Kubernetes object; unknown keys are errors."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        use_enum_values=False,
    )
