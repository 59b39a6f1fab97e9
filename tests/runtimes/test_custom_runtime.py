from __future__ import annotations

import importlib.util
import os
import py_compile
import sys
from pathlib import Path

import numpy as np
import pytest

from podserve.core.errors import InvalidInput, ModelLoadFailed
from podserve.core.tensors import Datatype, Tensor
from podserve.runtimes import ModelAPI
from podserve.runtimes.custom import import_model_class, load_class_from_directory
from tests.runtimes.runtime_helpers import EXAMPLES, infer, load_dir, request, tensor

SENTIMENT = EXAMPLES / "sentiment"


def texts(*values: bytes) -> Tensor:
    return tensor("text", list(values), Datatype.BYTES)


@pytest.fixture(scope="module")
def sentiment() -> ModelAPI:
    return load_dir(SENTIMENT)


def test_sentiment_end_to_end(sentiment: ModelAPI) -> None:
    req = request(texts(b"i love it, absolutely wonderful", b"terrible, a waste of money", b""))
    out = infer(sentiment, req)
    assert list(out) == ["label", "score"]
    assert out["label"].datatype is Datatype.BYTES
    assert out["score"].datatype is Datatype.FP32
    assert list(out["label"].data) == [b"positive", b"negative", b"positive"]
    score = out["score"].data
    assert score[0] > 0.5 > score[1]


def test_sentiment_predict_is_a_linear_model_of_featurize(sentiment: ModelAPI) -> None:
    featurize = load_class_from_directory(SENTIMENT, "model:featurize")
    weights = np.load(SENTIMENT / "weights.npy").astype(np.float64)
    phrases = ["great value", "not good at all", "the staff were rude"]
    features = featurize(phrases, weights.shape[0] - 1)  # type: ignore[operator]
    expected = 1.0 / (1.0 + np.exp(-(features @ weights[:-1] + weights[-1])))
    req = request(texts(*(p.encode() for p in phrases)))
    np.testing.assert_allclose(infer(sentiment, req)["score"].data, expected, rtol=1e-5)


def test_sentiment_requested_output_only(sentiment: ModelAPI) -> None:
    req = request(texts(b"good"), outputs=("label",))
    assert list(infer(sentiment, req)) == ["label"]


def test_sentiment_bad_inputs_name_the_field(sentiment: ModelAPI) -> None:
    with pytest.raises(InvalidInput, match="'text' has datatype FP32"):
        sentiment.validate(request(tensor("text", np.zeros(2, dtype=np.float32))))
    with pytest.raises(InvalidInput, match="missing input 'text'"):
        sentiment.validate(request(tensor("body", [b"x"], Datatype.BYTES)))
    with pytest.raises(InvalidInput, match="'text' must be UTF-8"):
        sentiment.preprocess(request(texts(b"\xff\xfe")))


# --- load_class_from_directory ------------------------------------------------------------
MODEL_SOURCE = """
from podserve.runtimes import ModelAPI

VERSION = {version}

class Echo(ModelAPI):
    def predict(self, batch):
        return batch
"""


def test_same_module_name_in_two_directories_does_not_collide(tmp_path: Path) -> None:
    for version in (1, 2):
        (tmp_path / f"m{version}").mkdir()
        (tmp_path / f"m{version}" / "model.py").write_text(MODEL_SOURCE.format(version=version))
    first = load_class_from_directory(tmp_path / "m1", "model:VERSION")
    second = load_class_from_directory(tmp_path / "m2", "model:VERSION")
    assert (first, second) == (1, 2)
    # Nothing was put on sys.path, and no module called plain "model" was registered.
    assert str(tmp_path / "m1") not in sys.path
    assert "model" not in sys.modules or sys.modules["model"].__file__ != str(
        tmp_path / "m1" / "model.py"
    )


def test_reloading_picks_up_edited_code(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(MODEL_SOURCE.format(version=1))
    assert load_class_from_directory(tmp_path, "model:VERSION") == 1
    (tmp_path / "model.py").write_text(MODEL_SOURCE.format(version=2))
    assert load_class_from_directory(tmp_path, "model:VERSION") == 2


def test_reload_ignores_bytecode_cached_for_the_same_size_and_second(tmp_path: Path) -> None:
    """The edit a user makes within one second, to a file of the same size: CPython's
    bytecode cache would match on (mtime in whole seconds, size) and serve the old code."""
    source = tmp_path / "model.py"
    source.write_text(MODEL_SOURCE.format(version=1))
    stamp = source.stat().st_mtime_ns
    assert load_class_from_directory(tmp_path, "model:VERSION") == 1
    # A stale cache entry as CPython would write it, whatever our loader does.
    py_compile.compile(str(source), cfile=importlib.util.cache_from_source(str(source)))
    source.write_text(MODEL_SOURCE.format(version=2))
    os.utime(source, ns=(stamp, stamp))
    assert load_class_from_directory(tmp_path, "model:VERSION") == 2


def test_reload_of_a_package_picks_up_an_edited_submodule(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .impl import VERSION\n")
    impl = package / "impl.py"
    impl.write_text("VERSION = 1\n")
    stamp = impl.stat().st_mtime_ns
    assert load_class_from_directory(tmp_path, "pkg:VERSION") == 1
    py_compile.compile(str(impl), cfile=importlib.util.cache_from_source(str(impl)))
    impl.write_text("VERSION = 2\n")
    os.utime(impl, ns=(stamp, stamp))
    assert load_class_from_directory(tmp_path, "pkg:VERSION") == 2


def test_package_with_relative_import_and_dataclass(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .impl import Config, Echo\n")
    (package / "impl.py").write_text(
        "from __future__ import annotations\n"
        "import dataclasses\n"
        "from podserve.runtimes import ModelAPI\n"
        "@dataclasses.dataclass\n"
        "class Config:\n    scale: float = 2.0\n"
        "class Echo(ModelAPI):\n"
        "    def predict(self, batch):\n        return batch\n"
    )
    cls = load_class_from_directory(tmp_path, "pkg:Echo")
    assert isinstance(cls, type)
    assert issubclass(cls, ModelAPI)
    config_cls = load_class_from_directory(tmp_path, "pkg:Config")
    assert config_cls().scale == 2.0  # type: ignore[operator]


@pytest.mark.parametrize(
    ("source", "path", "message"),
    [
        (None, "model:Echo", "has no model.py or model/__init__.py"),
        (MODEL_SOURCE.format(version=1), "model:Missing", "has no attribute 'Missing'"),
        (MODEL_SOURCE.format(version=1), "model", "must look like 'module:Class'"),
        ("raise RuntimeError('boom')\n", "model:Echo", "RuntimeError: boom"),
    ],
)
def test_load_errors_are_model_load_failed(
    tmp_path: Path, source: str | None, path: str, message: str
) -> None:
    if source is not None:
        (tmp_path / "model.py").write_text(source)
    with pytest.raises(ModelLoadFailed) as info:
        load_class_from_directory(tmp_path, path)
    assert message in info.value.message


def test_import_model_class_prefers_the_directory_then_installed_packages(
    tmp_path: Path,
) -> None:
    (tmp_path / "model.py").write_text(MODEL_SOURCE.format(version=7))
    assert import_model_class("model:VERSION", tmp_path) == 7
    # A dotted path is an installed package, even when a directory is given.
    assert import_model_class("podserve.runtimes.base:ModelAPI", tmp_path) is ModelAPI
    with pytest.raises(ModelLoadFailed, match="cannot import 'nope_not_installed'"):
        import_model_class("nope_not_installed:X", tmp_path)


def test_docs_show_the_example_class_verbatim() -> None:
    # docs/runtimes.md promises a copy-pasteable class: it must be the tested one.
    docs = (Path(__file__).resolve().parents[2] / "docs" / "runtimes.md").read_text()
    shown = docs.split("```python\n# model.py\n", 1)[1].split("```", 1)[0]
    source = (SENTIMENT / "model.py").read_text()
    assert shown == source.split('"""', 2)[2].lstrip("\n")
