"""A tensor's reference into a registered region, as the protocol's parameters spell it.

An input or requested output that lives in shared memory carries three parameters
instead of data (Triton's shared-memory extension, docs/protocol/
extension_shared_memory.md in github.com/triton-inference-server/server):

    shared_memory_region      the registered region's name (required)
    shared_memory_byte_size   bytes the tensor takes (required)
    shared_memory_offset      where it starts inside the region (default 0)

REST carries them as JSON values and gRPC as `InferParameter`s; both decode to plain
Python values before they get here. Triton defaults a missing byte size to 0 and then
fails on the size mismatch; podserve asks for it by name instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from podserve.core.errors import InvalidInput

SHARED_MEMORY_REGION = "shared_memory_region"
SHARED_MEMORY_OFFSET = "shared_memory_offset"
SHARED_MEMORY_BYTE_SIZE = "shared_memory_byte_size"
SHARED_MEMORY_PARAMETERS = frozenset(
    {SHARED_MEMORY_REGION, SHARED_MEMORY_OFFSET, SHARED_MEMORY_BYTE_SIZE}
)


@dataclass(frozen=True, slots=True)
class RegionRef:
    region: str
    offset: int
    byte_size: int

    def as_parameters(self) -> dict[str, Any]:
        return {
            SHARED_MEMORY_REGION: self.region,
            SHARED_MEMORY_OFFSET: self.offset,
            SHARED_MEMORY_BYTE_SIZE: self.byte_size,
        }


def region_ref(parameters: Mapping[str, Any], where: str) -> RegionRef | None:
    """The shared-memory reference in a tensor's parameters; None when they name none.
    `where` names the tensor in messages ("input 'INPUT0'")."""
    if not SHARED_MEMORY_PARAMETERS.intersection(parameters):
        return None
    region = parameters.get(SHARED_MEMORY_REGION)
    if region is None:
        raise InvalidInput(
            f"{where}: sets {SHARED_MEMORY_BYTE_SIZE} or {SHARED_MEMORY_OFFSET} without "
            f"{SHARED_MEMORY_REGION}"
        )
    if type(region) is not str or not region:
        raise InvalidInput(f"{where}: {SHARED_MEMORY_REGION} must be a non-empty string")
    if SHARED_MEMORY_BYTE_SIZE not in parameters:
        raise InvalidInput(f"{where}: {SHARED_MEMORY_REGION} needs {SHARED_MEMORY_BYTE_SIZE}")
    return RegionRef(
        region=region,
        offset=_count(parameters.get(SHARED_MEMORY_OFFSET, 0), SHARED_MEMORY_OFFSET, where),
        byte_size=_count(parameters[SHARED_MEMORY_BYTE_SIZE], SHARED_MEMORY_BYTE_SIZE, where),
    )


def without_references(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters left once the shared-memory ones are consumed: a model that hands
    an input back as an output must not have it taken for one written to a region."""
    return {k: v for k, v in parameters.items() if k not in SHARED_MEMORY_PARAMETERS}


def _count(value: object, field: str, where: str) -> int:
    # bool is an int to Python, never to the protocol
    if type(value) is not int or value < 0:
        raise InvalidInput(f"{where}: {field} must be a non-negative integer, got {value!r}")
    return value
