"""The bound every decoded input shape meets, on both edges (REST JSON and binary,
gRPC), before numpy sees it.

numpy refuses an array whose dimensions, zero ones aside, multiply past what an index
can address ("array is too big", or "Maximum allowed dimension exceeded" for one huge
dimension) even when another dimension is 0 and the array holds nothing. A shape such
as [0, 10**19] therefore must be refused as the client's mistake (400 naming the input),
not reach numpy and come back as a 500. The bound is far above any tensor a request
body (bounded by max_body_bytes) can carry.
"""

from __future__ import annotations

from podserve.core.errors import InvalidInput

MAX_EXTENT = 2**40  # elements, counting each zero dimension as 1
MAX_DIMS = 64  # numpy's limit on dimensions


def check_shape(name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Return `shape` if numpy can build an array of it; raise InvalidInput otherwise.
    Dimensions are already known to be non-negative integers."""
    if len(shape) > MAX_DIMS:
        raise InvalidInput(
            f"input {name!r}: 'shape' has {len(shape)} dimensions, at most {MAX_DIMS} allowed"
        )
    extent = 1
    for dim in shape:
        extent *= dim or 1
        if extent > MAX_EXTENT:
            raise InvalidInput(
                f"input {name!r}: shape {list(shape)} is too large: its dimensions (zeros "
                f"counted as 1) multiply past {MAX_EXTENT}"
            )
    return shape
