"""A request with zero rows, refused for every edge before it is queued.

An input whose first (batch) dimension is 0 asks for nothing: there is no row to
compute, and runtimes fail on it in their own ways (scikit-learn raises "Found array
with 0 sample(s)", the embedding encoder indexes an empty list), which used to reach the
client as a 500. It is the client's mistake, so it is a 400 naming the input, the same
on REST and gRPC because it is decided here, after decoding.
"""

from __future__ import annotations

from podserve.core.errors import InvalidInput
from podserve.core.tensors import InferRequest


def check_rows(request: InferRequest) -> None:
    """Raise InvalidInput when an input has a batch dimension of 0."""
    for tensor in request.inputs:
        shape = tensor.data.shape
        if shape and shape[0] == 0:
            raise InvalidInput(
                f"input {tensor.name!r} has shape {list(shape)}: 0 rows; a request needs at "
                "least one row"
            )
