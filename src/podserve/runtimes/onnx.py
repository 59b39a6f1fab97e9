"""ONNX runtime: an onnxruntime InferenceSession, CPU by default.

Parameters (model.yaml `parameters:`):
  providers                 execution providers in order of preference
                            (default ["CPUExecutionProvider"])
  intra_op_num_threads      threads inside one operator (default: onnxruntime's, one per
                            physical core it sees; set it to the pod's CPU limit)
  inter_op_num_threads      threads across independent operators (default: onnxruntime's)
  graph_optimization_level  disable | basic | extended | all (default all)
  allow_spinning            whether idle intra-op threads spin-wait for the next operator
                            (default true, onnxruntime's). Spinning trims latency but burns
                            CPU the server's event loop needs when cores are few; false
                            lets the threads sleep between calls.

When model.yaml declares no inputs/outputs they are read from the graph, so the model's
OIP metadata is right without repeating it. Non-tensor outputs (sequences, maps, such as
skl2onnx's ZipMap) are left out of derived outputs; convert classifiers with
`options={"zipmap": False}` to get tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from podserve.core.errors import ModelLoadFailed
from podserve.core.tensors import Datatype, TensorSpec
from podserve.core.types import Array
from podserve.runtimes.base import LoadContext, ModelAPI, Payload
from podserve.runtimes.parameters import OnnxParameters

# onnxruntime's NodeArg.type strings for tensors -> OIP datatypes.
ONNX_TYPE_TO_DATATYPE: dict[str, Datatype] = {
    "tensor(bool)": Datatype.BOOL,
    "tensor(uint8)": Datatype.UINT8,
    "tensor(uint16)": Datatype.UINT16,
    "tensor(uint32)": Datatype.UINT32,
    "tensor(uint64)": Datatype.UINT64,
    "tensor(int8)": Datatype.INT8,
    "tensor(int16)": Datatype.INT16,
    "tensor(int32)": Datatype.INT32,
    "tensor(int64)": Datatype.INT64,
    "tensor(float16)": Datatype.FP16,
    "tensor(float)": Datatype.FP32,
    "tensor(double)": Datatype.FP64,
    "tensor(string)": Datatype.BYTES,
}


class OnnxModel(ModelAPI):
    Parameters = OnnxParameters

    def __init__(self) -> None:
        super().__init__()
        self.session: Any = None
        self._output_names: list[str] = []
        self._string_inputs: frozenset[str] = frozenset()

    def load(self, context: LoadContext) -> None:
        import onnxruntime as ort

        params = context.options_as(OnnxParameters)
        path = context.artifact_path
        if not path.is_file():
            raise ModelLoadFailed(f"ONNX artefact {path} does not exist (set `artifact`)")
        providers = params.providers
        missing = [p for p in providers if p not in ort.get_available_providers()]
        if missing:
            raise ModelLoadFailed(
                f"onnxruntime providers {missing} are not available here; available: "
                f"{ort.get_available_providers()}"
            )
        options = ort.SessionOptions()
        if params.intra_op_num_threads is not None:
            options.intra_op_num_threads = params.intra_op_num_threads
        if params.inter_op_num_threads is not None:
            options.inter_op_num_threads = params.inter_op_num_threads
        if params.allow_spinning is not None:
            spinning = "1" if params.allow_spinning else "0"
            options.add_session_config_entry("session.intra_op.allow_spinning", spinning)
            options.add_session_config_entry("session.inter_op.allow_spinning", spinning)
        options.graph_optimization_level = _optimization_level(ort, params.graph_optimization_level)
        try:
            self.session = ort.InferenceSession(
                str(path), sess_options=options, providers=providers
            )
        except Exception as exc:
            raise ModelLoadFailed(f"onnxruntime cannot load {path.name}: {exc}") from exc

        graph_inputs = {a.name: a for a in self.session.get_inputs()}
        graph_outputs = {a.name: a for a in self.session.get_outputs()}
        self.inputs = _resolve("input", self.inputs, graph_inputs, skip_non_tensor=False)
        self.outputs = _resolve("output", self.outputs, graph_outputs, skip_non_tensor=True)
        if not self.outputs:
            raise ModelLoadFailed(f"{path.name} has no tensor outputs")
        missing_inputs = sorted(set(graph_inputs) - {s.name for s in self.inputs})
        if missing_inputs:
            raise ModelLoadFailed(
                f"model.yaml must declare every graph input; missing {missing_inputs}"
            )
        self._output_names = [s.name for s in self.outputs]
        self._string_inputs = frozenset(s.name for s in self.inputs if s.datatype is Datatype.BYTES)

    def unload(self) -> None:
        self.session = None

    def predict(self, batch: Payload) -> Payload:
        feed = batch
        if self._string_inputs:
            # onnxruntime wants str elements for tensor(string); OIP BYTES carries bytes.
            feed = dict(batch)
            for name in self._string_inputs:
                feed[name] = _decode(batch[name])
        results = self.session.run(self._output_names, feed)
        out: Payload = {}
        for name, value in zip(self._output_names, results, strict=True):
            array = np.asarray(value)
            out[name] = _encode(array) if array.dtype.kind in ("U", "O") else array
        return out


def _resolve(
    kind: str, declared: tuple[TensorSpec, ...], graph: dict[str, Any], *, skip_non_tensor: bool
) -> tuple[TensorSpec, ...]:
    """Declared specs checked against the graph, or specs derived from it."""
    if not declared:
        derived = []
        for arg in graph.values():
            datatype = ONNX_TYPE_TO_DATATYPE.get(arg.type)
            if datatype is None:
                if skip_non_tensor:
                    continue
                raise ModelLoadFailed(f"graph {kind} {arg.name!r} has unsupported type {arg.type}")
            derived.append(TensorSpec(arg.name, datatype, _shape(arg.shape)))
        return tuple(derived)
    for spec in declared:
        arg = graph.get(spec.name)
        if arg is None:
            raise ModelLoadFailed(
                f"model.yaml declares {kind} {spec.name!r}, but the graph's {kind}s are "
                f"{sorted(graph)}"
            )
        datatype = ONNX_TYPE_TO_DATATYPE.get(arg.type)
        if datatype is not spec.datatype:
            raise ModelLoadFailed(
                f"{kind} {spec.name!r} is declared {spec.datatype} but the graph has {arg.type}"
            )
        graph_shape = _shape(arg.shape)
        if len(graph_shape) != len(spec.shape) or any(
            g != -1 and d != g for d, g in zip(spec.shape, graph_shape, strict=True)
        ):
            raise ModelLoadFailed(
                f"{kind} {spec.name!r} is declared with shape {list(spec.shape)} but the graph "
                f"has {list(graph_shape)} (-1 = dynamic)"
            )
    return declared


def _shape(dims: Sequence[object] | None) -> tuple[int, ...]:
    # Symbolic (str) and unknown (None) dimensions are dynamic: OIP writes them as -1.
    return tuple(d if isinstance(d, int) and d >= 0 else -1 for d in dims or ())


def _decode(array: Array) -> Array:
    flat = [v.decode() if isinstance(v, bytes) else str(v) for v in array.ravel()]
    return np.array(flat, dtype=object).reshape(array.shape)


def _encode(array: Array) -> Array:
    flat = [v if isinstance(v, bytes) else str(v).encode() for v in array.ravel()]
    return np.array(flat, dtype=object).reshape(array.shape)


def _optimization_level(ort: Any, name: str) -> Any:
    levels = ort.GraphOptimizationLevel
    mapping = {
        "disable": levels.ORT_DISABLE_ALL,
        "basic": levels.ORT_ENABLE_BASIC,
        "extended": levels.ORT_ENABLE_EXTENDED,
        "all": levels.ORT_ENABLE_ALL,
    }
    return mapping[name]  # one of these: OnnxParameters checked it
