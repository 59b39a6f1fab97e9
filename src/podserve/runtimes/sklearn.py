"""scikit-learn runtime: one fitted estimator (or pipeline) behind one 2-D feature input.

Artefacts:
  *.skops           loaded with `skops.io`, refusing any type that is not trusted by skops'
                    defaults or listed in `parameters.trusted_types` (safe to load from
                    a source you do not fully trust)
  *.joblib, *.pkl   loaded with joblib (pickle: it runs code from the file, so only load
                    artefacts you built or trust)

Parameters (model.yaml `parameters:`):
  method          predict (default) | predict_proba | decision_function | transform
  trusted_types   extra type names skops may load, e.g. ["_operator.neg"]
  assume_finite   true (default): skip sklearn's NaN/inf scan of every batch (see predict)
  blas_threads    BLAS threads, process-wide (default: the usable CPUs less one)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from podserve.core.errors import ModelLoadFailed
from podserve.core.tensors import Datatype, TensorSpec
from podserve.core.types import Array
from podserve.runtimes.base import LoadContext, ModelAPI, Payload
from podserve.runtimes.cpus import compute_threads
from podserve.runtimes.parameters import SklearnParameters

_DEFAULT_OUTPUT_NAMES = {
    "predict": "predict",
    "predict_proba": "probabilities",
    "decision_function": "decision_function",
    "transform": "transform",
}
_FEATURE_DATATYPES = (Datatype.FP32, Datatype.FP64)


class SklearnModel(ModelAPI):
    Parameters = SklearnParameters

    def __init__(self) -> None:
        super().__init__()
        self.estimator: Any = None
        self._method: Callable[[Array], Array] | None = None
        self._input_name = "features"
        self._output_name = "predict"
        self._input_dtype: np.dtype[Any] | None = None
        self._output_dtype: np.dtype[Any] | None = None
        self._assume_finite = True

    def load(self, context: LoadContext) -> None:
        params = context.options_as(SklearnParameters)
        path = context.artifact_path
        self.estimator = _load_estimator(path, tuple(params.trusted_types))
        # after the load: importing scikit-learn and SciPy loads BLAS libraries of their own
        _limit_blas_threads(params.blas_threads or compute_threads())
        method_name = params.method
        method = getattr(self.estimator, method_name, None)
        if not callable(method):
            raise ModelLoadFailed(
                f"{type(self.estimator).__name__} loaded from {path.name} has no {method_name}()"
            )
        self._method = method
        self._assume_finite = params.assume_finite
        self._input_dtype = _estimator_float_dtype(self.estimator)
        self.inputs = self._resolve_input()
        self._input_name = self.inputs[0].name
        self.outputs = self._resolve_output(method_name)
        out = self.outputs[0]
        self._output_name = out.name
        self._output_dtype = None if out.datatype is Datatype.BYTES else out.datatype.numpy_dtype

    def unload(self) -> None:
        self.estimator = None
        self._method = None

    def predict(self, batch: Payload) -> Payload:
        return {self._output_name: self._convert_output(self._call(batch[self._input_name]))}

    # --- helpers ---------------------------------------------------------------------
    def _call(self, x: Array) -> Array:
        method = self._method
        if method is None:
            raise ModelLoadFailed("sklearn model used before load()")
        if self._input_dtype is not None:
            # Compute in the dtype of the fitted weights (float64 almost always): numpy would
            # upcast inside the matmul anyway, and some estimators would otherwise compute
            # in float32 and disagree with the same estimator called on float64 features.
            x = x.astype(self._input_dtype, copy=False)
        # Each call has a fixed cost that only batching amortizes: with scikit-learn 1.9.1
        # and narwhals 2.29, one-row MLPClassifier.predict took ~150 us here, of which
        # check_array's dataframe detection on a plain ndarray (`_nw_into_df_or_series`,
        # `_get_feature_names`) was ~53 us (issue 16; measured with timeit, best of 7).
        if not self._assume_finite:
            return np.asarray(method(x))
        # sklearn validates every batch; its NaN/inf scan is a full pass over the features.
        # Measured on LogisticRegression, 256x512 float32: 173 us -> 146 us per call with
        # the scan skipped; the context itself costs ~3 us. sklearn's config is
        # thread-local, so this is safe on concurrent worker threads.
        import sklearn

        with sklearn.config_context(assume_finite=True):
            return np.asarray(method(x))

    def _convert_output(self, result: Array) -> Array:
        if result.dtype.kind in ("U", "O"):
            # String class labels become BYTES: OIP BYTES tensors hold `bytes` elements.
            return np.array([str(v).encode() for v in result.ravel()], dtype=object).reshape(
                result.shape
            )
        if self._output_dtype is not None and result.dtype != self._output_dtype:
            return result.astype(self._output_dtype, copy=False)
        return result

    def _resolve_input(self) -> tuple[TensorSpec, ...]:
        if len(self.inputs) > 1:
            raise ModelLoadFailed(
                "an sklearn model takes one 2-D feature input; model.yaml declares "
                f"{[s.name for s in self.inputs]}"
            )
        if self.inputs:
            spec = self.inputs[0]
            if spec.datatype not in _FEATURE_DATATYPES or len(spec.shape) != 2:
                raise ModelLoadFailed(
                    f"sklearn input {spec.name!r} must be FP32 or FP64 with shape [-1, n_features];"
                    f" model.yaml declares {spec.datatype} {list(spec.shape)}"
                )
            return self.inputs
        n_features = getattr(self.estimator, "n_features_in_", None)
        if n_features is None:
            raise ModelLoadFailed(
                f"{type(self.estimator).__name__} does not record n_features_in_; declare the "
                "feature input in model.yaml (FP32 or FP64, shape [-1, n_features])"
            )
        datatype = Datatype.FP32 if self._input_dtype == np.float32 else Datatype.FP64
        return (TensorSpec("features", datatype, (-1, int(n_features))),)

    def _resolve_output(self, method_name: str) -> tuple[TensorSpec, ...]:
        if len(self.outputs) > 1:
            raise ModelLoadFailed(
                f"an sklearn model produces one output (the result of {method_name}); "
                f"model.yaml declares {[s.name for s in self.outputs]}"
            )
        if self.outputs:
            return self.outputs
        # The result's dtype and trailing shape are properties of the fitted estimator
        # (classes, components); one call on a row of zeros reads them for any estimator.
        spec = self.inputs[0]
        try:
            sample = self._call(np.zeros((1, spec.shape[1]), dtype=spec.datatype.numpy_dtype))
        except Exception as exc:
            raise ModelLoadFailed(f"{method_name}() fails on a row of zeros: {exc}") from exc
        datatype = (
            Datatype.BYTES if sample.dtype.kind in ("U", "O") else Datatype.from_numpy(sample.dtype)
        )
        name = _DEFAULT_OUTPUT_NAMES[method_name]
        return (TensorSpec(name, datatype, (-1, *sample.shape[1:])),)


def _load_estimator(path: Path, trusted: tuple[str, ...]) -> Any:
    if not path.is_file():
        raise ModelLoadFailed(f"sklearn artefact {path} does not exist (set `artifact`)")
    suffix = path.suffix.lower()
    if suffix == ".skops":
        import skops.io

        try:
            untrusted = skops.io.get_untrusted_types(file=path)
        except Exception as exc:
            raise ModelLoadFailed(f"{path.name} is not a readable skops file: {exc}") from exc
        refused = sorted(set(untrusted) - set(trusted))
        if refused:
            raise ModelLoadFailed(
                f"{path.name} contains types skops does not trust: {refused}. If you trust "
                "this file, list them in parameters.trusted_types"
            )
        try:
            return skops.io.load(path, trusted=list(untrusted))
        except Exception as exc:
            raise ModelLoadFailed(f"cannot load {path.name} with skops: {exc}") from exc
    if suffix in (".joblib", ".pkl", ".pickle"):
        import joblib

        try:
            return joblib.load(path)
        except Exception as exc:
            raise ModelLoadFailed(f"cannot load {path.name} with joblib: {exc}") from exc
    raise ModelLoadFailed(
        f"sklearn artefact {path.name}: unknown format {suffix!r}; use .skops, .joblib or .pkl"
    )


def _estimator_float_dtype(estimator: Any) -> np.dtype[Any] | None:
    """The float dtype the estimator computes in, read from its first fitted weights."""
    steps = getattr(estimator, "steps", None)
    first = steps[0][1] if steps else estimator
    for attr in ("coef_", "mean_", "scale_", "components_", "coefs_"):
        value = getattr(first, attr, None)
        if isinstance(value, list) and value:
            value = value[0]
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            return np.dtype(value.dtype)
    return None


def _limit_blas_threads(threads: int) -> None:
    """Cap the BLAS pool numpy and scikit-learn compute in (OpenBLAS, MKL), process-wide.

    Without a cap, OpenBLAS splits every batch's matmuls over all cores and its idle
    workers spin between calls, taking the core the event loop needs: batching on served
    scikit-learn's MLP 32-256-256-10 at half the rate of batching off (1,475 against 2,836
    req/s at concurrency 64; docs/benchmarks.md, issue 16). runtimes/cpus.py explains the
    default. threadpoolctl comes with scikit-learn.
    """
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=threads, user_api="blas")
