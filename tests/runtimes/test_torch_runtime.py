"""torch runtimes, on tiny modules built here. torch is an optional extra (`[torch]`): this
module is skipped where it is not installed; CI installs it."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from podserve.core.errors import ModelLoadFailed
from podserve.core.tensors import Datatype
from tests.runtimes.runtime_helpers import infer, load_dir, request, tensor, write_yaml

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

# TorchScript is deprecated since torch 2.9 and torch.jit.load says so on every load; the
# runtime still serves TorchScript files, so the test accepts that one warning.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")

IO_YAML = """\
inputs:
  - {name: x, datatype: FP32, shape: [-1, 4]}
outputs:
  - {name: y, datatype: FP32, shape: [-1, 2]}
"""


class Affine(torch.nn.Module):  # type: ignore[misc,name-defined]  # torch is Any here
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    # TorchScript reads these annotations; to mypy torch is a module value here
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[name-defined]
        return torch.tanh(self.linear(x))


def _affine() -> Any:
    torch.manual_seed(0)
    return Affine().eval()


def _x(rows: int = 5) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((rows, 4)).astype(np.float32)


def _reference(module: Any, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return np.asarray(module(torch.from_numpy(x)).numpy())


# --- TorchScript and torch.export --------------------------------------------------------
def _torchscript_dir(tmp_path: Path, extra: str = "") -> Path:
    directory = write_yaml(
        tmp_path / "ts", f"runtime: torchscript\nartifact: model.pt\n{IO_YAML}{extra}"
    )
    with warnings.catch_warnings():
        # Building the file is the test's business, not the runtime's: torch 2.9+ warns
        # that jit.script and jit.save are deprecated.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(_affine()), str(directory / "model.pt"))
    return directory


def test_torchscript_predicts_like_the_module(tmp_path: Path) -> None:
    model = load_dir(_torchscript_dir(tmp_path))
    out = infer(model, request(tensor("x", _x())))["y"]
    assert out.datatype is Datatype.FP32
    np.testing.assert_allclose(out.data, _reference(_affine(), _x()), rtol=1e-6)


def test_read_only_input_is_accepted_without_warning(tmp_path: Path) -> None:
    # The binary protocol decodes into read-only buffers; torch.from_numpy would warn.
    model = load_dir(_torchscript_dir(tmp_path))
    x = np.frombuffer(_x().tobytes(), dtype=np.float32).reshape(5, 4)
    assert not x.flags.writeable
    np.testing.assert_allclose(model.predict({"x": x})["y"], _reference(_affine(), _x()), rtol=1e-6)


def test_dtype_parameter_casts_module_and_inputs(tmp_path: Path) -> None:
    model = load_dir(_torchscript_dir(tmp_path, "parameters: {dtype: float64}\n"))
    out = model.predict({"x": _x()})["y"]
    # Computed in float64, returned as the declared FP32.
    assert out.dtype == np.float32
    expected = _reference(_affine().double(), _x().astype(np.float64))
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_exported_program_loads(tmp_path: Path) -> None:
    directory = write_yaml(tmp_path / "ep", f"runtime: torchscript\nartifact: model.pt2\n{IO_YAML}")
    batch = torch.export.Dim("batch")
    program = torch.export.export(_affine(), (torch.zeros(2, 4),), dynamic_shapes={"x": {0: batch}})
    torch.export.save(program, str(directory / "model.pt2"))
    model = load_dir(directory)
    for rows in (1, 7):
        np.testing.assert_allclose(
            model.predict({"x": _x(rows)})["y"], _reference(_affine(), _x(rows)), rtol=1e-6
        )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("parameters: {device: cuda}\n", "CUDA is not available"),
        ("parameters: {device: tpu9}\n", "parameter device"),
        ("parameters: {dtype: int8}\n", "parameter 'dtype': Input should be 'float32'"),
    ],
)
def test_bad_parameters_fail_at_load(tmp_path: Path, extra: str, message: str) -> None:
    if "cuda" in extra and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ModelLoadFailed) as info:
        load_dir(_torchscript_dir(tmp_path, extra))
    assert message in info.value.message


def test_undeclared_signature_is_refused(tmp_path: Path) -> None:
    directory = write_yaml(tmp_path / "m", "runtime: torchscript\nartifact: model.pt\n")
    with pytest.raises(ModelLoadFailed, match="declare inputs and outputs"):
        load_dir(directory)


# --- safetensors + model class -------------------------------------------------------------
NET_SOURCE = """
import torch


class TinyNet(torch.nn.Module):
    def __init__(self, features: int, hidden: int) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2)
        )
        # Computed, not loaded: stays on meta after a meta-device build, so the runtime
        # must notice and build the module normally.
        self.register_buffer("offset", torch.arange(2, dtype=torch.float32), persistent=False)
        self.built_on = self.offset.device.type

    def forward(self, x, mask):
        logits = self.body(x) + self.offset
        return {"logits": logits, "argmax": logits.argmax(dim=1), "mask_sum": mask.sum(dim=1)}


class Plain(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)
        self.built_on = self.linear.weight.device.type

    def forward(self, x):
        return self.linear(x), self.linear(x).sum(dim=1)
"""
NET_YAML = """\
runtime: torch
artifact: weights.safetensors
model_class: "net:{cls}"
parameters:
  init_kwargs: {{features: 3, hidden: 8}}
"""
TINY_IO = """\
inputs:
  - {name: x, datatype: FP32, shape: [-1, 3]}
  - {name: mask, datatype: INT64, shape: [-1, 3]}
outputs:
  - {name: logits, datatype: FP32, shape: [-1, 2]}
  - {name: argmax, datatype: INT64, shape: [-1]}
  - {name: mask_sum, datatype: INT64, shape: [-1]}
"""


def _load_source_module(directory: Path) -> object:
    from podserve.runtimes.custom import load_class_from_directory

    return load_class_from_directory(directory, "net:TinyNet")


def _safetensors_dir(tmp_path: Path, state: dict[str, object] | None = None) -> Path:
    directory = tmp_path / "tiny"
    directory.mkdir()
    (directory / "net.py").write_text(NET_SOURCE)
    torch.manual_seed(0)
    net = _load_source_module(directory)(features=3, hidden=8)  # type: ignore[operator]
    safetensors_torch.save_file(state or net.state_dict(), str(directory / "weights.safetensors"))
    return write_yaml(directory, NET_YAML.format(cls="TinyNet") + TINY_IO)


def test_safetensors_model_class_end_to_end(tmp_path: Path) -> None:
    directory = _safetensors_dir(tmp_path)
    model = load_dir(directory)
    x = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)
    mask = np.array([[1, 0, 1]] * 4, dtype=np.int64)
    out = infer(model, request(tensor("x", x), tensor("mask", mask)))

    torch.manual_seed(0)
    reference = _load_source_module(directory)(features=3, hidden=8).eval()  # type: ignore[operator]
    with torch.no_grad():
        expected = reference(torch.from_numpy(x), torch.from_numpy(mask))
    np.testing.assert_allclose(out["logits"].data, expected["logits"].numpy(), rtol=1e-6)
    np.testing.assert_array_equal(out["argmax"].data, expected["argmax"].numpy())
    assert out["argmax"].datatype is Datatype.INT64
    np.testing.assert_array_equal(out["mask_sum"].data, [2, 2, 2, 2])
    assert not model.module.training  # type: ignore[attr-defined]
    # The non-persistent buffer was computed, not left on the meta device: the module
    # was rebuilt on the real device.
    assert not any(t.is_meta for t in model.module.buffers())  # type: ignore[attr-defined]
    assert model.module.built_on == "cpu"  # type: ignore[attr-defined]


def test_meta_build_is_used_when_the_module_allows_it(tmp_path: Path) -> None:
    directory = tmp_path / "plain"
    directory.mkdir()
    (directory / "net.py").write_text(NET_SOURCE)
    linear = torch.nn.Linear(3, 2)
    safetensors_torch.save_file(
        {f"linear.{k}": v for k, v in linear.state_dict().items()},
        str(directory / "weights.safetensors"),
    )
    write_yaml(
        directory,
        'runtime: torch\nartifact: weights.safetensors\nmodel_class: "net:Plain"\n'
        "inputs:\n  - {name: x, datatype: FP32, shape: [-1, 3]}\n"
        "outputs:\n  - {name: y, datatype: FP32, shape: [-1, 2]}\n"
        "  - {name: total, datatype: FP32, shape: [-1]}\n",
    )
    model = load_dir(directory)
    x = np.ones((2, 3), dtype=np.float32)
    out = model.predict({"x": x})
    with torch.no_grad():
        expected = linear(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out["y"], expected, rtol=1e-6)
    np.testing.assert_allclose(out["total"], expected.sum(axis=1), rtol=1e-6)
    # Built on the meta device (no random initialisation), weights assigned from the file.
    assert model.module.built_on == "meta"  # type: ignore[attr-defined]
    assert not any(p.is_meta for p in model.module.parameters())  # type: ignore[attr-defined]


def test_strict_loading_refuses_missing_weights(tmp_path: Path) -> None:
    directory = _safetensors_dir(tmp_path, state={"body.0.weight": torch.zeros(8, 3)})
    with pytest.raises(ModelLoadFailed, match=r"Missing key\(s\)"):
        load_dir(directory)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda y: y.replace('model_class: "net:TinyNet"\n', ""), "needs model_class"),
        (lambda y: y.replace("net:TinyNet", "torch:Tensor"), "not a torch.nn.Module subclass"),
        (
            lambda y: y.replace("{features: 3, hidden: 8}", "[3, 8]"),
            "'init_kwargs': Input should be a valid",
        ),
        (lambda y: y.replace("hidden: 8", "hidden: 9"), "size mismatch"),
        (lambda y: y.replace("weights.safetensors", "weights.bin"), "needs a .safetensors"),
    ],
)
def test_configuration_errors_fail_at_load(tmp_path: Path, edit: object, message: str) -> None:
    directory = _safetensors_dir(tmp_path)
    path = directory / "model.yaml"
    path.write_text(edit(path.read_text()))  # type: ignore[operator]
    with pytest.raises(ModelLoadFailed) as info:
        load_dir(directory)
    assert message in info.value.message
