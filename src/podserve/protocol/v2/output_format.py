"""Which outputs a request wants as binary data (binary tensor data extension).

A requested output's `parameters.binary_data` decides for that output; otherwise the
request-level `parameters.binary_data_output` decides for every output; otherwise JSON.
The decoder has already checked that both are booleans when present.
"""

from __future__ import annotations

from collections.abc import Iterable

from podserve.core.tensors import InferRequest


def binary_output_names(request: InferRequest, output_names: Iterable[str]) -> set[str]:
    """The subset of `output_names` (the outputs being returned) to send as binary."""
    default = request.parameters.get("binary_data_output") is True
    explicit = {o.name: o.binary_data for o in request.outputs if o.binary_data is not None}
    return {name for name in output_names if explicit.get(name, default)}
