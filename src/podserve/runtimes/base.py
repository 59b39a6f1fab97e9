"""The model API every runtime implements, and that users implement to bring their own code.

A request goes through these steps:

    validate(request)                     per request, on the event loop; cheap checks
    preprocess(request)   -> Payload      per request, on the worker thread
    predict(batch)        -> Payload      once per batch; the batch is the requests'
                                          payloads concatenated along axis 0
    postprocess(out, req) -> tensors      per request, on that request's slice of `out`

`Payload` is a mapping of name -> numpy array whose first axis is the batch axis. The
engine concatenates payloads, calls `predict` once, and splits the result back by each
request's row count, so batching, admission, drain and metrics apply to custom code
unchanged. A model that cannot batch sets `supports_batching = False`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np

from podserve.config.model_config import ModelConfig
from podserve.core.errors import InvalidInput
from podserve.core.tensors import Datatype, InferRequest, Tensor, TensorSpec
from podserve.core.types import Array
from podserve.runtimes.error_quotes import QUOTED_NAMES, quote
from podserve.runtimes.parameters import (
    OpenParameters,
    RuntimeParameters,
    validate_parameters,
)
from podserve.runtimes.requested_outputs import check_requested

Payload = dict[str, Array]
P = TypeVar("P", bound=RuntimeParameters)


@dataclass(frozen=True, slots=True)
class LoadContext:
    """What a model gets to load itself."""

    config: ModelConfig
    directory: Path
    parameters: Mapping[str, Any] = field(default_factory=dict)
    # `parameters` validated against the model class's `Parameters` (done at load)
    options: RuntimeParameters = field(default_factory=OpenParameters)

    @property
    def artifact_path(self) -> Path:
        return self.config.artifact_path()

    def options_as(self, kind: type[P]) -> P:
        """The parameters as the runtime's own model: validated at load already, or now
        (a context built by hand, in a test or a script)."""
        if isinstance(self.options, kind):
            return self.options
        raw = self.parameters or self.config.parameters
        return validate_parameters(kind, raw, model=self.config.name, runtime=self.config.runtime)


class ModelAPI(abc.ABC):
    """Base class for runtimes and user models. Override `load` and `predict`; override
    `preprocess`/`postprocess` for custom input/output handling.

    The default `preprocess` checks every declared input is present with the declared
    datatype and a compatible shape, and returns them by name. The default `postprocess`
    turns each output array into a tensor, keeping only the outputs the client asked for.
    """

    supports_batching: bool = True
    # The model.yaml `parameters:` this class takes; validated at load, unknown keys
    # refused. User models may declare their own; the default takes any keys.
    Parameters: ClassVar[type[RuntimeParameters]] = OpenParameters

    def __init__(self) -> None:
        self.inputs: tuple[TensorSpec, ...] = ()
        self.outputs: tuple[TensorSpec, ...] = ()

    # --- lifecycle -----------------------------------------------------------------
    def load(self, context: LoadContext) -> None:  # noqa: B027 - optional hook, no-op default
        """Load weights from `context.directory`. Runs once, on a worker thread."""

    def unload(self) -> None:  # noqa: B027 - optional hook, no-op default
        """Release what `load` acquired. The default drops references and lets GC work."""

    # --- request path --------------------------------------------------------------
    def validate(self, request: InferRequest) -> None:
        """Cheap checks the engine runs on the event loop before queueing, so malformed
        requests are refused before they cost a worker anything. The default checks each
        declared input is present with the declared datatype and a compatible shape, and
        each requested output is a declared one, asked for once."""
        if self.inputs:
            self._validate_inputs(request)
        if self.outputs:
            check_requested(request.outputs, [s.name for s in self.outputs], request.model_name)

    def _validate_inputs(self, request: InferRequest) -> None:
        given = request.input_map()
        for spec in self.inputs:
            tensor = given.get(spec.name)
            if tensor is None:
                raise InvalidInput(
                    f"missing input {spec.name!r}; model {request.model_name!r} expects "
                    f"{[s.name for s in self.inputs]}"
                )
            if tensor.datatype is not spec.datatype:
                raise InvalidInput(
                    f"input {spec.name!r} has datatype {tensor.datatype}, expected {spec.datatype}"
                )
            if not spec.accepts_shape(tensor.shape):
                raise InvalidInput(
                    f"input {spec.name!r} has shape {list(tensor.shape)}, expected "
                    f"{list(spec.shape)} (-1 = any)"
                )
        if len(given) != len(self.inputs):
            # Every declared input is there, so the rest are unknown: quote a few, count
            # them all, without sorting what may be a client's million names.
            declared = {s.name for s in self.inputs}
            unknown = list(islice((n for n in given if n not in declared), QUOTED_NAMES))
            raise InvalidInput(
                f"unknown input(s) {quote(unknown, total=len(given) - len(declared))}; "
                f"expected {quote([s.name for s in self.inputs])}"
            )

    def preprocess(self, request: InferRequest) -> Payload:
        """Turn one validated request into its payload. Runs on a worker thread, after
        `validate`; the default maps input names to their arrays."""
        return {t.name: t.data for t in request.inputs}

    @abc.abstractmethod
    def predict(self, batch: Payload) -> Payload:
        """Compute outputs for a batch; arrays keep the batch axis first."""

    def postprocess(self, outputs: Payload, request: InferRequest) -> tuple[Tensor, ...]:
        # `validate` checked the names against the declared outputs; a model that declares
        # none is checked here, against what it produced.
        check_requested(request.outputs, list(outputs), request.model_name)
        wanted = {o.name for o in request.outputs}
        return tuple(
            Tensor(name=name, datatype=Datatype.from_numpy(array.dtype), data=array)
            for name, array in outputs.items()
            if not wanted or name in wanted
        )

    # --- helpers the engine uses -----------------------------------------------------
    def batch_size(self, payload: Payload) -> int:
        """Rows this request contributes to a batch: the first axis of its first array."""
        for array in payload.values():
            return int(array.shape[0]) if array.ndim else 1
        return 1

    def warmup_request(self, model_name: str) -> InferRequest | None:
        """One request of zeros (empty bytes) on the declared inputs; None if undeclared."""
        if not self.inputs:
            return None
        tensors = []
        for spec in self.inputs:
            shape = tuple(1 if d == -1 else d for d in spec.shape)
            if spec.datatype is Datatype.BYTES:
                data = np.full(shape, b"", dtype=object)
            else:
                data = np.zeros(shape, dtype=spec.datatype.numpy_dtype)
            tensors.append(Tensor(spec.name, spec.datatype, data))
        return InferRequest(model_name=model_name, inputs=tuple(tensors))
