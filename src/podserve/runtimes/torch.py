"""PyTorch runtimes. torch is an optional extra: it is imported inside these functions only.

  torchscript   `artifact` is a TorchScript file (torch.jit.save), or a torch.export
                program (*.pt2, torch.export.save) since TorchScript is deprecated
  torch         `model_class` is an nn.Module (`module:Class`, from the model directory
                or an installed package) built with `parameters.init_kwargs`; `artifact`
                is a .safetensors file of its state dict, loaded strictly

Parameters (model.yaml `parameters:`):
  device        cpu (default), cuda, cuda:1, ...
  dtype         float32 (default), float16, bfloat16, float64: the module's floating
                weights and floating inputs are cast to it
  num_threads   torch intra-op threads (process-wide setting; default torch's)
  init_kwargs   keyword arguments of model_class (runtime torch only)

torch modules carry no tensor signature, so model.yaml must declare inputs and outputs.
The module is called with the inputs positionally, in declared order. It returns a
tensor (the first declared output), a tuple/list (declared outputs in order) or a dict
keyed by output name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from podserve.core.errors import InferenceFailed, ModelLoadFailed
from podserve.core.tensors import Datatype
from podserve.core.types import Array
from podserve.runtimes.base import LoadContext, ModelAPI, Payload
from podserve.runtimes.custom import import_model_class
from podserve.runtimes.parameters import TorchParameters, TorchScriptParameters
from podserve.runtimes.safetensors_mmap import mmap_state_dict


class _TorchModel(ModelAPI):
    Parameters: ClassVar[type[TorchScriptParameters]] = TorchScriptParameters
    """Shared request path: numpy in, one forward under inference_mode, numpy out."""

    def __init__(self) -> None:
        super().__init__()
        self.module: Any = None
        self._torch: Any = None
        self._device: Any = None
        self._dtype: Any = None
        # The file mapping that backs zero-copy weights; it lives as long as they do.
        self._mapping: Any = None

    def _configure(self, context: LoadContext) -> Any:
        """Import torch and read device/dtype/num_threads; returns the torch module."""
        import torch

        name = context.config.name
        if not self.inputs or not self.outputs:
            raise ModelLoadFailed(
                f"model {name!r}: torch modules carry no tensor signature; declare inputs "
                "and outputs in model.yaml"
            )
        byte_inputs = [s.name for s in self.inputs if s.datatype is Datatype.BYTES]
        if byte_inputs:
            raise ModelLoadFailed(f"model {name!r}: torch takes no BYTES inputs {byte_inputs}")
        params = context.options_as(self.Parameters)
        try:
            self._device = torch.device(params.device)
        except RuntimeError as exc:
            raise ModelLoadFailed(f"torch parameter device: {exc}") from exc
        if self._device.type == "cuda" and not torch.cuda.is_available():
            raise ModelLoadFailed(f"torch parameter device={self._device}: CUDA is not available")
        self._dtype = getattr(torch, params.dtype)
        if params.num_threads is not None:
            torch.set_num_threads(params.num_threads)
        self._torch = torch
        return torch

    def _finish(self, module: Any) -> None:
        self.module = module.to(device=self._device, dtype=self._dtype).eval()

    def unload(self) -> None:
        # Dropping the references frees the weights and, once no tensor views it, the
        # mapping (closing it while tensors still view it would raise).
        self.module = None
        self._mapping = None

    def predict(self, batch: Payload) -> Payload:
        torch = self._torch
        args = [self._to_tensor(batch[spec.name]) for spec in self.inputs]
        with torch.inference_mode():
            result = self.module(*args)
        return self._to_payload(result)

    def _to_tensor(self, array: Array) -> Any:
        if not array.flags.writeable or not array.flags.c_contiguous:
            # torch.from_numpy shares memory and warns on read-only arrays (the binary
            # protocol decodes into read-only buffers); one copy makes it safe.
            array = np.array(array, order="C", copy=True)
        tensor = self._torch.from_numpy(array)
        if tensor.is_floating_point():
            return tensor.to(device=self._device, dtype=self._dtype)
        return tensor.to(device=self._device)

    def _to_payload(self, result: Any) -> Payload:
        torch = self._torch
        if isinstance(result, torch.Tensor):
            values: Mapping[str, Any] = {self.outputs[0].name: result}
        elif isinstance(result, tuple | list):
            if len(result) != len(self.outputs):
                raise InferenceFailed(
                    f"module returned {len(result)} tensors; model.yaml declares "
                    f"{len(self.outputs)} outputs"
                )
            values = {s.name: t for s, t in zip(self.outputs, result, strict=True)}
        elif isinstance(result, Mapping):
            values = result
        else:
            raise InferenceFailed(f"module returned {type(result).__name__}, not tensors")
        out: Payload = {}
        for spec in self.outputs:
            tensor = values.get(spec.name)
            if tensor is None:
                raise InferenceFailed(f"module returned no output {spec.name!r}")
            if tensor.dtype == torch.bfloat16:
                # numpy has no bfloat16; float32 holds every bfloat16 value exactly.
                tensor = tensor.float()
            array = tensor.detach().cpu().numpy()
            want = spec.datatype.numpy_dtype
            out[spec.name] = array if array.dtype == want else array.astype(want)
        return out


class TorchScriptModel(_TorchModel):
    Parameters = TorchScriptParameters

    def load(self, context: LoadContext) -> None:
        torch = self._configure(context)
        path = context.artifact_path
        if not path.is_file():
            raise ModelLoadFailed(f"TorchScript artefact {path} does not exist (set `artifact`)")
        try:
            if path.suffix == ".pt2":
                module = torch.export.load(str(path)).module()
            else:
                module = torch.jit.load(str(path), map_location=self._device)
        except Exception as exc:
            raise ModelLoadFailed(f"torch cannot load {path.name}: {exc}") from exc
        if path.suffix == ".pt2":
            # An exported program's module has no train/eval switch of its own: it was
            # traced in the mode it was exported in, so only device/dtype apply.
            self.module = module.to(device=self._device, dtype=self._dtype)
        else:
            self._finish(module)


class SafetensorsTorchModel(_TorchModel):
    Parameters = TorchParameters

    def load(self, context: LoadContext) -> None:
        torch = self._configure(context)
        config = context.config
        if not config.model_class:
            raise ModelLoadFailed(
                f"model {config.name!r}: runtime 'torch' needs model_class, the nn.Module "
                "to load the safetensors weights into"
            )
        cls = import_model_class(config.model_class, context.directory)
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
            raise ModelLoadFailed(f"{config.model_class} is not a torch.nn.Module subclass")
        init_kwargs = context.options_as(TorchParameters).init_kwargs
        path = context.artifact_path
        if path.suffix != ".safetensors" or not path.is_file():
            raise ModelLoadFailed(f"runtime 'torch' needs a .safetensors artifact; got {path}")
        state = self._read_state(path)
        self._finish(_build(torch, cls, init_kwargs, state))

    def _read_state(self, path: Any) -> dict[str, Any]:
        if str(self._device) == "cpu":
            # Zero-copy: the weights are views into the file's mapping (see the module).
            import torch

            state, self._mapping = mmap_state_dict(torch, path)
            return state
        from safetensors import safe_open

        # For an accelerator, safe_open materialises each tensor straight on the device.
        try:
            with safe_open(str(path), framework="pt", device=str(self._device)) as handle:
                return {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118
        except Exception as exc:
            raise ModelLoadFailed(f"cannot read {path.name}: {exc}") from exc


def _build(torch: Any, cls: type[Any], init_kwargs: dict[str, Any], state: dict[str, Any]) -> Any:
    """Instantiate `cls` and load `state` strictly.

    The module is first built on the meta device and the loaded tensors are assigned to it,
    so its random initialisation never allocates memory or burns time. A module that
    computes non-persistent buffers in __init__ (absent from the state dict) would keep
    them on meta; such a module is rebuilt normally and the weights copied in.
    """
    try:
        with torch.device("meta"):
            module = cls(**init_kwargs)
    except Exception:
        module = None  # __init__ does work meta tensors cannot do: build it normally below
    try:
        if module is not None:
            module.load_state_dict(state, strict=True, assign=True)
            if not any(t.is_meta for t in (*module.parameters(), *module.buffers())):
                return module
        module = cls(**init_kwargs)
        module.load_state_dict(state, strict=True)
        return module
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ModelLoadFailed(f"cannot load weights into {cls.__name__}: {exc}") from exc
