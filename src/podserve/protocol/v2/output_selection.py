"""The checks of a request's `outputs` (which outputs to answer, and in what form), the
one place both OIP decoders run them: REST's (`protocol/v2/decode.py`) and gRPC's
(`server/grpc/codec.py`). So one selection gets one answer, status and message on both
edges, and before the model runs: the gRPC edge used to answer an output asked twice
with it once, accept a non-boolean `binary_data`, and refuse an empty name only after
the model had run, with another message.

Each requested output must have a non-empty name, asked for once; its
`parameters.binary_data`, when given, must be a boolean and is lifted out of the
parameters into `RequestedOutput.binary_data` (REST's binary extension acts on it; gRPC
always answers raw contents, so there it changes nothing). Whether the model has such an
output is the model's check (`runtimes/requested_outputs.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from podserve.core.errors import InvalidInput
from podserve.core.tensors import RequestedOutput
from podserve.protocol.v2.json_data import json_type


def output_name(index: int, name: object, seen: set[str]) -> str:
    """The name of `outputs[index]`, once checked: a non-empty string not in `seen`
    (the names of the outputs before it), to which it is added."""
    if type(name) is not str or not name:
        raise InvalidInput(f"outputs[{index}]: 'name' must be a non-empty string")
    if name in seen:
        raise InvalidInput(f"output {name!r} is requested more than once")
    seen.add(name)
    return name


def requested_output(name: str, parameters: Mapping[str, Any]) -> RequestedOutput:
    """Output `name` (checked by `output_name`) with its `parameters`."""
    if "binary_data" not in parameters:  # nearly always: no copy
        return RequestedOutput(name=name, parameters=parameters)
    binary = parameters["binary_data"]
    if binary is not None and type(binary) is not bool:
        raise InvalidInput(
            f"output {name!r}: parameters.binary_data must be a boolean, got {json_type(binary)}"
        )
    rest = {key: value for key, value in parameters.items() if key != "binary_data"}
    return RequestedOutput(name=name, binary_data=binary, parameters=rest)
