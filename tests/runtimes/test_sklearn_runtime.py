from __future__ import annotations

import operator
from pathlib import Path

import joblib
import numpy as np
import pytest
import skops.io
from sklearn.datasets import load_iris
from sklearn.decomposition import PCA
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.svm import LinearSVC

from podserve.core.errors import InvalidInput, ModelLoadFailed
from podserve.core.tensors import Datatype, TensorSpec
from podserve.runtimes.sklearn import SklearnModel
from tests.runtimes.runtime_helpers import EXAMPLES, infer, load_dir, request, tensor, write_yaml

X, Y = load_iris(return_X_y=True)
X32 = X.astype(np.float32)


@pytest.fixture(scope="module")
def iris() -> SklearnModel:
    model = load_dir(EXAMPLES / "iris")
    assert isinstance(model, SklearnModel)
    return model


def reference() -> LogisticRegression:
    path = EXAMPLES / "iris" / "model.skops"
    estimator = skops.io.load(path, trusted=skops.io.get_untrusted_types(file=path))
    assert isinstance(estimator, LogisticRegression)
    return estimator


def test_iris_predicts_like_the_estimator(iris: SklearnModel) -> None:
    out = infer(iris, request(tensor("features", X32)))
    assert list(out) == ["label"]
    assert out["label"].datatype is Datatype.INT64
    np.testing.assert_array_equal(out["label"].data, reference().predict(X32.astype(np.float64)))
    # The example is a real classifier, not a constant.
    assert (out["label"].data == Y).mean() > 0.95


def test_iris_proba_returns_declared_fp32_probabilities() -> None:
    model = load_dir(EXAMPLES / "iris-proba")
    out = infer(model, request(tensor("features", X32[:7])))["probabilities"]
    assert out.datatype is Datatype.FP32
    assert out.data.shape == (7, 3)
    expected = reference().predict_proba(X32[:7].astype(np.float64))
    np.testing.assert_allclose(out.data, expected, rtol=1e-6, atol=1e-7)


def test_iris_metadata_is_the_declared_one(iris: SklearnModel) -> None:
    assert iris.inputs == (TensorSpec("features", Datatype.FP32, (-1, 4)),)
    assert iris.outputs == (TensorSpec("label", Datatype.INT64, (-1,)),)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (tensor("features", X[:2]), "datatype FP64"),  # FP64 where FP32 is declared
        (tensor("features", X32[:2, :3]), "shape [2, 3]"),
        (tensor("features", X32[0]), "shape [4]"),
        (tensor("petals", X32[:2]), "missing input 'features'"),
    ],
)
def test_bad_inputs_are_refused_naming_the_field(
    iris: SklearnModel, bad: object, message: str
) -> None:
    with pytest.raises(InvalidInput, match="features") as info:
        iris.validate(request(bad))  # type: ignore[arg-type]
    assert message in info.value.message


def test_unknown_extra_input_is_refused(iris: SklearnModel) -> None:
    req = request(tensor("features", X32[:1]), tensor("extra", X32[:1]))
    with pytest.raises(InvalidInput, match="extra"):
        iris.validate(req)


def _save(tmp_path: Path, estimator: object, artefact: str, extra_yaml: str = "") -> Path:
    directory = tmp_path / "m"
    directory.mkdir(exist_ok=True)
    if artefact.endswith(".skops"):
        skops.io.dump(estimator, directory / artefact)
    else:
        joblib.dump(estimator, directory / artefact)
    return write_yaml(directory, f"runtime: sklearn\nartifact: {artefact}\n{extra_yaml}")


def test_skops_untrusted_type_is_refused_with_its_name(tmp_path: Path) -> None:
    estimator = make_pipeline(
        FunctionTransformer(operator.neg), LogisticRegression(max_iter=1000)
    ).fit(X, Y)
    directory = _save(tmp_path, estimator, "model.skops")
    with pytest.raises(ModelLoadFailed, match=r"_operator\.neg.*trusted_types"):
        load_dir(directory)


def test_skops_type_listed_in_trusted_types_loads(tmp_path: Path) -> None:
    estimator = make_pipeline(
        FunctionTransformer(operator.neg), LogisticRegression(max_iter=1000)
    ).fit(X, Y)
    directory = _save(
        tmp_path, estimator, "model.skops", "parameters:\n  trusted_types: ['_operator.neg']\n"
    )
    model = load_dir(directory)
    out = model.predict({"features": X})
    np.testing.assert_array_equal(out["predict"], estimator.predict(X))


@pytest.mark.parametrize(("features", "datatype"), [(X, Datatype.FP64), (X32, Datatype.FP32)])
def test_joblib_artifact_derives_metadata_and_default_output_name(
    tmp_path: Path, features: np.ndarray, datatype: Datatype
) -> None:
    # The derived input datatype is the dtype the estimator was fitted in.
    estimator = LogisticRegression(max_iter=500).fit(features, Y)
    model = load_dir(_save(tmp_path, estimator, "model.joblib", "parameters: {method: predict}"))
    assert model.inputs == (TensorSpec("features", datatype, (-1, 4)),)
    assert model.outputs == (TensorSpec("predict", Datatype.INT64, (-1,)),)
    out = infer(model, request(tensor("features", features)))
    np.testing.assert_array_equal(out["predict"].data, estimator.predict(features))


@pytest.mark.parametrize(
    ("estimator", "method", "name", "shape"),
    [
        (LogisticRegression(max_iter=500), "predict_proba", "probabilities", (-1, 3)),
        (LinearSVC(), "decision_function", "decision_function", (-1, 3)),
        (PCA(n_components=2), "transform", "transform", (-1, 2)),
    ],
)
def test_methods(
    tmp_path: Path, estimator: object, method: str, name: str, shape: tuple[int, ...]
) -> None:
    fitted = estimator.fit(X, Y)  # type: ignore[attr-defined]
    model = load_dir(_save(tmp_path, fitted, "model.pkl", f"parameters: {{method: {method}}}"))
    assert model.outputs == (TensorSpec(name, Datatype.FP64, shape),)
    out = model.predict({"features": X})[name]
    np.testing.assert_allclose(out, getattr(fitted, method)(X), rtol=1e-12)


def test_string_labels_become_bytes(tmp_path: Path) -> None:
    names = np.array(["setosa", "versicolor", "virginica"])[Y]
    estimator = LogisticRegression(max_iter=500).fit(X, names)
    model = load_dir(_save(tmp_path, estimator, "model.joblib"))
    assert model.outputs[0].datatype is Datatype.BYTES
    out = infer(model, request(tensor("features", X[:3])))["predict"]
    assert out.datatype is Datatype.BYTES
    assert list(out.data) == [s.encode() for s in estimator.predict(X[:3])]


def test_unknown_method_is_refused(tmp_path: Path) -> None:
    directory = _save(tmp_path, PCA().fit(X), "m.joblib", "parameters: {method: fit}")
    with pytest.raises(ModelLoadFailed, match="parameter 'method': Input should be 'predict'"):
        load_dir(directory)


def test_method_the_estimator_lacks_is_refused(tmp_path: Path) -> None:
    directory = _save(tmp_path, PCA().fit(X), "m.joblib", "parameters: {method: predict}")
    with pytest.raises(ModelLoadFailed, match=r"PCA .* has no predict\(\)"):
        load_dir(directory)


def test_unknown_format_and_missing_file_are_refused(tmp_path: Path) -> None:
    directory = write_yaml(tmp_path / "m", "runtime: sklearn\nartifact: model.bin\n")
    with pytest.raises(ModelLoadFailed, match="does not exist"):
        load_dir(directory)
    (directory / "model.bin").write_bytes(b"\0")
    with pytest.raises(ModelLoadFailed, match=r"unknown format '\.bin'"):
        load_dir(directory)


def test_declared_input_must_be_2d_float(tmp_path: Path) -> None:
    extra = "inputs:\n  - {name: x, datatype: INT64, shape: [-1, 4]}\n"
    directory = _save(tmp_path, LogisticRegression(max_iter=1000).fit(X, Y), "m.joblib", extra)
    with pytest.raises(ModelLoadFailed, match="'x' must be FP32 or FP64"):
        load_dir(directory)


def test_assume_finite_off_lets_sklearn_reject_nan(tmp_path: Path) -> None:
    directory = _save(
        tmp_path,
        LogisticRegression(max_iter=500).fit(X, Y),
        "m.joblib",
        "parameters: {assume_finite: false}",
    )
    model = load_dir(directory)
    bad = X[:2].copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        model.predict({"features": bad})
