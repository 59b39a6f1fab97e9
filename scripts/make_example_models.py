"""Build the example model repository `examples/models/` deterministically.

    python scripts/make_example_models.py [--out DIR]

Every artefact is seeded and written byte-for-byte reproducibly on one machine and
library set (skops' object ids and zip timestamps, which change on every run, are
normalised). Training runs through BLAS, so another CPU or library version may round
differently: tests/runtimes/test_examples.py therefore checks that a fresh build is
byte-identical to a second fresh build, and that it predicts what the committed
artefacts predict.

  iris/          LogisticRegression on iris (sklearn, skops): features FP32 [-1, 4] -> label
  iris-proba/    the same estimator, predict_proba -> probabilities FP32 [-1, 3]
  mlp/           MLPClassifier on 8x8 digits, converted with skl2onnx (ONNX); its inputs and
                 outputs are read from the graph
  wide-mlp/      a compute-heavy ONNX MLP 256 -> 2048 -> 2048 -> 16 with seeded weights,
                 where batching pays off
  sentiment/     bring-your-own-code: model.py (hand-written) + weights.npy trained here
  simple/        Triton's `simple` for tritonclient's examples: model.py (hand-written),
                 INT32 INPUT0, INPUT1 [-1, 16] -> OUTPUT0 = sum, OUTPUT1 = difference
  simple_string/ the same code on BYTES (integers written as text), Triton's `simple_string`
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import shutil
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "examples" / "models"
SENTIMENT_SOURCE = DEFAULT_OUT / "sentiment" / "model.py"
SIMPLE_SOURCE = DEFAULT_OUT / "simple" / "model.py"
SEED = 20240601
# Oldest IR/opset that has every operator used: loadable by onnxruntime >= 1.14.
ONNX_IR_VERSION = 8
ONNX_OPSET = 17
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def build_all(out: Path) -> list[Path]:
    """Write every example model under `out`; returns the files written."""
    builders: list[Callable[[Path], list[Path]]] = [
        build_iris,
        build_mlp,
        build_wide_mlp,
        build_sentiment,
        build_simple,
    ]
    written: list[Path] = []
    for build in builders:
        written += build(out)
    return written


# --- iris (sklearn + skops) --------------------------------------------------------------
IRIS_YAML = """\
# Logistic regression on the iris dataset, saved with skops (safe to load).
# Regenerate with: python scripts/make_example_models.py
name: {name}
runtime: sklearn
artifact: model.skops
platform: sklearn
inputs:
  - name: features          # sepal length, sepal width, petal length, petal width (cm)
    datatype: FP32
    shape: [-1, 4]
outputs:
  - name: {output}
    datatype: {datatype}
    shape: {shape}
batching:
  max_batch_size: 64
parameters:
  method: {method}
"""


def build_iris(out: Path) -> list[Path]:
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    x, y = load_iris(return_X_y=True)
    estimator = LogisticRegression(max_iter=1000, random_state=0).fit(x, y)
    written = []
    for name, output, datatype, shape, method in (
        ("iris", "label", "INT64", "[-1]", "predict"),
        ("iris-proba", "probabilities", "FP32", "[-1, 3]", "predict_proba"),
    ):
        directory = _fresh_dir(out / name)
        written.append(_write_skops(estimator, directory / "model.skops", x))
        written.append(
            _write_text(
                directory / "model.yaml",
                IRIS_YAML.format(
                    name=name, output=output, datatype=datatype, shape=shape, method=method
                ),
            )
        )
    return written


def _write_skops(estimator: Any, path: Path, check_x: np.ndarray[Any, Any]) -> Path:
    """skops.io.dump, with the run-dependent parts made stable.

    skops names every object by its `id()` (in the schema and in the .npy member names)
    and stamps zip members with the current time. Ids are renumbered in schema order and
    members written sorted with a fixed timestamp; the file is then loaded back and must
    predict exactly what the estimator does, so a skops format change fails here, loudly.
    """
    import skops.io

    with zipfile.ZipFile(io.BytesIO(skops.io.dumps(estimator))) as source:
        members = {info.filename: source.read(info) for info in source.infolist()}
    schema = json.loads(members.pop("schema.json"))
    renumber: dict[int, int] = {}

    def visit(node: Any) -> Any:
        if isinstance(node, dict):
            if "__id__" in node:
                node["__id__"] = renumber.setdefault(node["__id__"], len(renumber) + 1)
            if isinstance(node.get("file"), str) and node["file"].endswith(".npy"):
                old = int(node["file"].removesuffix(".npy"))
                new_name = f"{renumber.setdefault(old, len(renumber) + 1)}.npy"
                members[new_name + ".renamed"] = members.pop(node["file"])
                node["file"] = new_name
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)
        return node

    visit(schema)
    leftover = [name for name in members if not name.endswith(".renamed")]
    if leftover:
        raise RuntimeError(f"skops wrote members the schema does not reference: {leftover}")
    final = {name.removesuffix(".renamed"): data for name, data in members.items()}
    final["schema.json"] = json.dumps(schema, indent=2, sort_keys=False).encode()
    _write_zip(path, final)

    loaded = skops.io.load(path, trusted=skops.io.get_untrusted_types(file=path))
    if not np.array_equal(loaded.predict_proba(check_x), estimator.predict_proba(check_x)):
        raise RuntimeError(f"{path} does not round-trip through skops")
    return path


def _write_zip(path: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=_ZIP_EPOCH)
            # Stored, not deflated: compressed bytes depend on the zlib build.
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            archive.writestr(info, members[name])


# --- mlp (sklearn -> skl2onnx) ---------------------------------------------------------
MLP_YAML = """\
# A small MLP classifier on 8x8 digit images (sklearn MLPClassifier + StandardScaler),
# converted to ONNX with skl2onnx. Inputs and outputs are not declared: the onnx runtime
# reads them from the graph (input FP32 [-1, 64]: pixel intensities 0..16; outputs
# label INT64 [-1] and probabilities FP32 [-1, 10]).
# Regenerate with: python scripts/make_example_models.py
name: mlp
runtime: onnx
artifact: model.onnx
platform: onnxruntime_onnx
batching:
  max_batch_size: 64
parameters:
  intra_op_num_threads: 1
"""


def build_mlp(out: Path) -> list[Path]:
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.datasets import load_digits
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_digits(return_X_y=True)
    pipeline = make_pipeline(
        StandardScaler(),
        MLPClassifier(hidden_layer_sizes=(32,), max_iter=60, random_state=SEED),
    )
    with warnings.catch_warnings():
        # A few dozen epochs reach ~99% training accuracy; full convergence would only
        # make the build slower.
        warnings.simplefilter("ignore", ConvergenceWarning)
        pipeline.fit(x, y)
    onnx_model = to_onnx(
        pipeline,
        initial_types=[("input", FloatTensorType([None, x.shape[1]]))],
        options={"zipmap": False},
        target_opset={"": ONNX_OPSET, "ai.onnx.ml": 3},
    )
    directory = _fresh_dir(out / "mlp")
    return [
        _write_onnx(onnx_model, directory / "model.onnx"),
        _write_text(directory / "model.yaml", MLP_YAML),
    ]


# --- wide-mlp (onnx.helper, seeded weights) ---------------------------------------------
WIDE_YAML = """\
# A compute-heavy MLP 256 -> 2048 -> ReLU -> 2048 -> ReLU -> 16 with seeded random
# weights (no training: it exists to exercise batching). Weights are stored as float16
# to keep the file small and cast to float32 when the session is created.
# One row is ~9.5 MFLOP; a batch turns onnxruntime's matrix-vector products into matrix
# products, so throughput grows with the batch size.
# Regenerate with: python scripts/make_example_models.py
name: wide-mlp
runtime: onnx
artifact: model.onnx
platform: onnxruntime_onnx
preload: true
inputs:
  - name: input
    datatype: FP32
    shape: [-1, 256]
outputs:
  - name: logits
    datatype: FP32
    shape: [-1, 16]
batching:
  max_batch_size: 64
  max_queue_delay_ms: 2
"""
WIDE_LAYERS = (256, 2048, 2048, 16)


# The benchmark's compute-heavy model: ~150 MFLOP a row, so that per-request HTTP work is
# small beside the compute and batching decides throughput. Its 151 MB file is built by
# `make bench` into a scratch directory (`--heavy`), never committed.
HEAVY_LAYERS = (1024, 8192, 8192, 16)


def build_wide_mlp(out: Path) -> list[Path]:
    return _build_mlp_onnx(out, "wide-mlp", WIDE_LAYERS, WIDE_YAML)


def build_heavy_mlp(out: Path) -> list[Path]:
    yaml_text = (
        WIDE_YAML.replace("wide-mlp", "heavy-mlp")
        .replace("256 -> 2048 -> ReLU -> 2048", "1024 -> 8192 -> ReLU -> 8192")
        .replace("~9.5 MFLOP", "~151 MFLOP")
        .replace("shape: [-1, 256]", "shape: [-1, 1024]")
        # One row costs ~12 ms (memory-bound) and 64 rows ~54 ms: a lone request dispatched
        # the moment the worker frees (work-conserving) would cost nearly a fifth of a full
        # batch. Classic Triton batching waits up to 10 ms for a full batch instead.
        .replace("max_queue_delay_ms: 2", "max_queue_delay_ms: 10\n  work_conserving: false")
        # Two batches of 32 in the system at concurrency 64: one computes while the event
        # loop answers the other's requests and decodes the next ones, instead of the model
        # idling while a single batch of 64 makes its round trip.
        .replace("max_batch_size: 64", "max_batch_size: 32")
        # Sleeping, not spinning, intra-op threads leave the event loop its CPU between
        # batches; on two cores that is worth more than the spin's latency.
        + "parameters:\n  allow_spinning: false\n  intra_op_num_threads: 1\n".replace(
            "python scripts/make_example_models.py", "python scripts/make_example_models.py --heavy"
        )
    )
    return _build_mlp_onnx(out, "heavy-mlp", HEAVY_LAYERS, yaml_text)


def _build_mlp_onnx(out: Path, name: str, layers: tuple[int, ...], yaml_text: str) -> list[Path]:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(SEED)
    nodes, initializers = [], []
    current = "input"
    last = len(layers) - 2
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(layers)):
        # He initialisation keeps activations O(1) through the ReLUs.
        weight = rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)
        bias = rng.standard_normal(fan_out) * 0.01
        initializers += [
            numpy_helper.from_array(weight.astype(np.float16), f"w{i}_fp16"),
            numpy_helper.from_array(bias.astype(np.float32), f"b{i}"),
        ]
        output = "logits" if i == last else f"h{i}"
        nodes += [
            helper.make_node("Cast", [f"w{i}_fp16"], [f"w{i}"], to=TensorProto.FLOAT),
            helper.make_node("MatMul", [current, f"w{i}"], [f"mm{i}"]),
            helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"z{i}" if i != last else output]),
        ]
        if i != last:
            nodes.append(helper.make_node("Relu", [f"z{i}"], [output]))
        current = output
    graph = helper.make_graph(
        nodes,
        name.replace("-", "_"),
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", layers[0]])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", layers[-1]])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)])
    directory = _fresh_dir(out / name)
    return [
        _write_onnx(model, directory / "model.onnx"),
        _write_text(directory / "model.yaml", yaml_text),
    ]


def _write_onnx(model: Any, path: Path) -> Path:
    import onnx

    model.ir_version = ONNX_IR_VERSION
    # Converter names and versions would change the bytes with every library upgrade.
    model.producer_name = "podserve-examples"
    model.producer_version = "1"
    del model.metadata_props[:]
    model.doc_string = ""
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString(deterministic=True))
    return path


# --- sentiment (bring your own code) ----------------------------------------------------
SENTIMENT_YAML = """\
# Bring-your-own-code example: model.py defines SentimentModel (a podserve ModelAPI);
# weights.npy holds its trained coefficients. See docs/runtimes.md.
# Regenerate weights with: python scripts/make_example_models.py
name: sentiment
runtime: custom
model_class: "model:SentimentModel"
artifact: weights.npy
inputs:
  - name: text
    datatype: BYTES
    shape: [-1]
outputs:
  - name: label             # b"positive" or b"negative"
    datatype: BYTES
    shape: [-1]
  - name: score             # probability that the text is positive
    datatype: FP32
    shape: [-1]
batching:
  max_batch_size: 128
parameters:
  threshold: 0.5
"""
SENTIMENT_FEATURES = 1024
POSITIVE = """\
i love this product it works great
absolutely wonderful experience highly recommend
the movie was fantastic and the acting superb
great value for the money very happy
excellent quality fast delivery five stars
this is the best purchase i have made all year
the staff were friendly and helpful
what a delightful little book i enjoyed every page
works perfectly and looks beautiful
i am very pleased with the results
brilliant performance a joy to watch
super comfortable and well made
the food was delicious and the service was good
amazing sound quality i love it
not bad at all actually quite good
easy to use and really reliable
a charming story with a happy ending
we had a great time and will come back
the update made everything faster and better
outstanding support they solved my problem quickly
good battery life and a lovely screen
my kids adore it best gift ever
it exceeded my expectations
the hotel was clean quiet and pleasant
an excellent film i would watch it again
"""
NEGATIVE = """\
i hate this product it broke after a day
terrible experience i do not recommend it
the movie was boring and the acting awful
a waste of money very disappointed
poor quality slow delivery one star
this is the worst purchase i have ever made
the staff were rude and unhelpful
what a dull book i could not finish it
stopped working and looks cheap
i am very unhappy with the results
a dreadful performance painful to watch
uncomfortable and badly made
the food was cold and the service was bad
awful sound quality i regret buying it
not good at all really quite bad
hard to use and totally unreliable
a depressing story with a terrible ending
we had a horrible time and will never return
the update made everything slower and worse
useless support they ignored my problem
the battery dies fast and the screen is ugly
my kids hate it worst gift ever
it fell far short of my expectations
the hotel was dirty noisy and unpleasant
an awful film i want my money back
"""


def build_sentiment(out: Path) -> list[Path]:
    from sklearn.linear_model import LogisticRegression

    from podserve.runtimes.custom import load_class_from_directory

    featurize = load_class_from_directory(SENTIMENT_SOURCE.parent, "model:featurize")
    assert callable(featurize)
    positive, negative = POSITIVE.splitlines(), NEGATIVE.splitlines()
    x = featurize([*positive, *negative], SENTIMENT_FEATURES)
    y = np.array([1] * len(positive) + [0] * len(negative))
    classifier = LogisticRegression(C=20.0, max_iter=1000).fit(x, y)
    weights = np.concatenate([classifier.coef_[0], classifier.intercept_]).astype(np.float32)

    directory = _fresh_dir(out / "sentiment", keep=("model.py",))
    if directory / "model.py" != SENTIMENT_SOURCE:
        shutil.copyfile(SENTIMENT_SOURCE, directory / "model.py")
    weights_path = directory / "weights.npy"
    np.save(weights_path, weights)
    return [
        directory / "model.py",
        weights_path,
        _write_text(directory / "model.yaml", SENTIMENT_YAML),
    ]


# --- simple and simple_string (Triton's client examples) --------------------------------
SIMPLE_YAML = """\
# Triton's `{name}` example model, for tritonclient's example programs: OUTPUT0 is
# INPUT0 + INPUT1 and OUTPUT1 is INPUT0 - INPUT1{note}. The code is model.py.
# Regenerate with: python scripts/make_example_models.py
name: {name}
runtime: custom
model_class: "model:SimpleModel"
inputs:
  - name: INPUT0
    datatype: {datatype}
    shape: [-1, 16]
  - name: INPUT1
    datatype: {datatype}
    shape: [-1, 16]
outputs:
  - name: OUTPUT0
    datatype: {datatype}
    shape: [-1, 16]
  - name: OUTPUT1
    datatype: {datatype}
    shape: [-1, 16]
batching:
  max_batch_size: 8
"""


def build_simple(out: Path) -> list[Path]:
    """No training: one hand-written model.py, copied into both directories."""
    written: list[Path] = []
    for name, datatype, note in (
        ("simple", "INT32", ""),
        ("simple_string", "BYTES", ",\n# every element an integer written as text"),
    ):
        directory = _fresh_dir(out / name, keep=("model.py",) if name == "simple" else ())
        if directory / "model.py" != SIMPLE_SOURCE:
            shutil.copyfile(SIMPLE_SOURCE, directory / "model.py")
        text = SIMPLE_YAML.format(name=name, datatype=datatype, note=note)
        written += [directory / "model.py", _write_text(directory / "model.yaml", text)]
    return written


# --- helpers ---------------------------------------------------------------------------
def _fresh_dir(directory: Path, keep: tuple[str, ...] = ()) -> Path:
    """An empty model directory, except for hand-written files named in `keep`."""
    directory.mkdir(parents=True, exist_ok=True)
    for child in directory.iterdir():
        if child.name in keep or child.name == "README.md":
            continue
        if child.is_dir():
            shutil.rmtree(child)
        else:
            child.unlink()
    return directory


def _write_text(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8", newline="\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="repository to write")
    parser.add_argument(
        "--heavy", action="store_true", help="build only the benchmark's heavy-mlp (151 MB)"
    )
    args = parser.parse_args(argv)
    for path in build_heavy_mlp(args.out) if args.heavy else build_all(args.out):
        print(f"{path.stat().st_size:>10,}  {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
