from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from sklearn.datasets import load_digits

from podserve.core.errors import InvalidInput, ModelLoadFailed
from podserve.core.tensors import Datatype, TensorSpec
from podserve.runtimes.onnx import OnnxModel
from tests.runtimes.runtime_helpers import (
    EXAMPLES,
    infer,
    load_dir,
    request,
    tensor,
    write_yaml,
)

DIGITS, DIGIT_LABELS = load_digits(return_X_y=True)


@pytest.fixture(scope="module")
def mlp() -> OnnxModel:
    model = load_dir(EXAMPLES / "mlp")
    assert isinstance(model, OnnxModel)
    return model


def test_mlp_metadata_is_derived_from_the_graph(mlp: OnnxModel) -> None:
    # examples/models/mlp/model.yaml declares no inputs or outputs.
    assert mlp.inputs == (TensorSpec("input", Datatype.FP32, (-1, 64)),)
    assert mlp.outputs == (
        TensorSpec("label", Datatype.INT64, (-1,)),
        TensorSpec("probabilities", Datatype.FP32, (-1, 10)),
    )


def test_mlp_matches_the_onnx_reference_evaluator(mlp: OnnxModel) -> None:
    x = DIGITS[:50].astype(np.float32)
    out = infer(mlp, request(tensor("input", x)))
    reference = ReferenceEvaluator(str(EXAMPLES / "mlp" / "model.onnx"))
    label, probabilities = (np.asarray(o) for o in reference.run(None, {"input": x}))
    np.testing.assert_array_equal(out["label"].data, label)
    np.testing.assert_allclose(out["probabilities"].data, probabilities, rtol=1e-4, atol=1e-5)
    assert (out["label"].data == DIGIT_LABELS[:50]).mean() > 0.9


def test_requested_outputs_are_the_only_ones_returned(mlp: OnnxModel) -> None:
    req = request(tensor("input", DIGITS[:2].astype(np.float32)), outputs=("probabilities",))
    assert list(infer(mlp, req)) == ["probabilities"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (tensor("input", DIGITS[:2]), "'input' has datatype FP64"),
        (tensor("input", DIGITS[:2, :10].astype(np.float32)), "'input' has shape [2, 10]"),
        (tensor("pixels", DIGITS[:2].astype(np.float32)), "missing input 'input'"),
    ],
)
def test_bad_inputs_are_refused(mlp: OnnxModel, bad: object, message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        mlp.validate(request(bad))  # type: ignore[arg-type]
    assert message in info.value.message


def _wide_reference(x: np.ndarray) -> np.ndarray:
    graph = onnx.load(str(EXAMPLES / "wide-mlp" / "model.onnx")).graph
    weights = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in graph.initializer}
    h = x.astype(np.float64)
    for layer in range(3):
        h = h @ weights[f"w{layer}_fp16"] + weights[f"b{layer}"]
        if layer < 2:
            h = np.maximum(h, 0.0)
    return h


def test_wide_mlp_matches_numpy_at_several_batch_sizes() -> None:
    model = load_dir(EXAMPLES / "wide-mlp")
    assert model.inputs == (TensorSpec("input", Datatype.FP32, (-1, 256)),)
    x = np.random.default_rng(0).standard_normal((33, 256)).astype(np.float32)
    expected = _wide_reference(x)
    for rows in (1, 8, 33):
        logits = infer(model, request(tensor("input", x[:rows])))["logits"].data
        assert logits.shape == (rows, 16)
        np.testing.assert_allclose(logits, expected[:rows], rtol=1e-4, atol=1e-4)


def _graph_model(path: Path) -> Path:
    """A graph with a symbolic and an unknown dimension, int64 and string tensors."""
    graph = helper.make_graph(
        [
            helper.make_node("Identity", ["ids"], ["ids_out"]),
            helper.make_node("Identity", ["words"], ["words_out"]),
        ],
        "g",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 3]),
            helper.make_tensor_value_info("words", TensorProto.STRING, [None]),
        ],
        [
            helper.make_tensor_value_info("ids_out", TensorProto.INT64, ["batch", 3]),
            helper.make_tensor_value_info("words_out", TensorProto.STRING, [None]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path / "model.onnx"))
    return path


def test_dynamic_dims_and_types_are_mapped(tmp_path: Path) -> None:
    directory = _graph_model(write_yaml(tmp_path / "g", "runtime: onnx\nartifact: model.onnx\n"))
    model = load_dir(directory)
    assert model.inputs == (
        TensorSpec("ids", Datatype.INT64, (-1, 3)),
        TensorSpec("words", Datatype.BYTES, (-1,)),
    )
    assert model.outputs == (
        TensorSpec("ids_out", Datatype.INT64, (-1, 3)),
        TensorSpec("words_out", Datatype.BYTES, (-1,)),
    )
    words = np.array([b"caf\xc3\xa9", b"x"], dtype=object)
    req = request(tensor("ids", np.arange(6).reshape(2, 3)), tensor("words", words, Datatype.BYTES))
    out = infer(model, req)
    np.testing.assert_array_equal(out["ids_out"].data, np.arange(6).reshape(2, 3))
    assert out["words_out"].datatype is Datatype.BYTES
    assert list(out["words_out"].data) == [b"caf\xc3\xa9", b"x"]


def _copy_mlp(tmp_path: Path, yaml_text: str) -> Path:
    directory = write_yaml(tmp_path / "mlp", "runtime: onnx\nartifact: model.onnx\n" + yaml_text)
    shutil.copy(EXAMPLES / "mlp" / "model.onnx", directory / "model.onnx")
    return directory


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        (
            "inputs:\n  - {name: pixels, datatype: FP32, shape: [-1, 64]}\n",
            "declares input 'pixels', but the graph's inputs are ['input']",
        ),
        (
            "inputs:\n  - {name: input, datatype: FP64, shape: [-1, 64]}\n",
            "declared FP64 but the graph has tensor(float)",
        ),
        (
            "inputs:\n  - {name: input, datatype: FP32, shape: [-1, 63]}\n",
            "declared with shape [-1, 63] but the graph has [-1, 64]",
        ),
        ("parameters: {providers: [CUDAExecutionProvider]}\n", "not available here"),
        (
            "parameters: {graph_optimization_level: max}\n",
            "'graph_optimization_level': Input should be",
        ),
        (
            "parameters: {intra_op_num_threads: -1}\n",
            "'intra_op_num_threads': Input should be greater",
        ),
    ],
)
def test_config_mismatches_fail_at_load(tmp_path: Path, yaml_text: str, message: str) -> None:
    with pytest.raises(ModelLoadFailed) as info:
        load_dir(_copy_mlp(tmp_path, yaml_text))
    assert message in info.value.message


def test_session_parameters_are_applied(tmp_path: Path) -> None:
    model = load_dir(
        _copy_mlp(
            tmp_path,
            "parameters: {intra_op_num_threads: 1, inter_op_num_threads: 1, "
            "graph_optimization_level: basic}\n",
        )
    )
    assert isinstance(model, OnnxModel)
    options = model.session.get_session_options()
    assert options.intra_op_num_threads == 1
    assert options.inter_op_num_threads == 1
    assert model.session.get_providers() == ["CPUExecutionProvider"]


def test_declared_subset_of_outputs_runs_only_those(tmp_path: Path) -> None:
    model = load_dir(
        _copy_mlp(tmp_path, "outputs:\n  - {name: label, datatype: INT64, shape: [-1]}\n")
    )
    out = model.predict({"input": DIGITS[:3].astype(np.float32)})
    assert list(out) == ["label"]


def test_corrupt_file_fails_at_load(tmp_path: Path) -> None:
    directory = write_yaml(tmp_path / "bad", "runtime: onnx\nartifact: model.onnx\n")
    (directory / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(ModelLoadFailed, match=r"onnxruntime cannot load model\.onnx"):
        load_dir(directory)


def test_allow_spinning_parameter_is_applied(tmp_path: Path) -> None:
    import yaml

    directory = tmp_path / "mlp"
    shutil.copytree(EXAMPLES / "mlp", directory)
    config_path = directory / "model.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["parameters"] = {**config.get("parameters", {}), "allow_spinning": False}
    config_path.write_text(yaml.safe_dump(config))
    model = load_dir(directory)
    assert isinstance(model, OnnxModel)
    entries = model.session.get_session_options().get_session_config_entry
    assert entries("session.intra_op.allow_spinning") == "0"
    assert entries("session.inter_op.allow_spinning") == "0"
