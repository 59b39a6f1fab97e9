"""One batch through a model's `ModelAPI` steps — the engine's worker thread and
`podserve batch` both call this, so a request is computed the same way everywhere:

    preprocess each → one predict on the concatenation → split → postprocess each

One bad request never fails its batch-mates: a preprocessing error stays with its request,
and when the batched predict fails (or its outputs cannot be split back) the requests are
retried one at a time, so only the culprit gets the error. Synchronous and free of I/O.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from podserve.core.errors import InferenceFailed, InvalidInput, PodserveError
from podserve.core.tensors import InferRequest, Tensor
from podserve.runtimes.base import ModelAPI, Payload
from podserve.runtimes.batch_dimension import shared_rows

log = logging.getLogger("podserve.runtimes")

Outcome = tuple[Tensor, ...] | PodserveError


@dataclass(slots=True)
class PhaseTimes:
    """Seconds one batch spent in each step (Triton's compute_input / compute_infer /
    compute_output), filled in by `run_batch` when given."""

    preprocess: float = 0.0
    predict: float = 0.0
    postprocess: float = 0.0


def run_batch(
    model: ModelAPI,
    requests: Sequence[InferRequest],
    *,
    name: str,
    validate: bool = False,
    on_error: Callable[[PodserveError], None] | None = None,
    times: PhaseTimes | None = None,
) -> list[Outcome]:
    """An outcome per request, in order. `validate` runs `model.validate` first (the
    engine has already done it on the event loop); `on_error` sees every error made;
    `times` receives the seconds spent in each step."""
    outcomes: list[Outcome | None] = [None] * len(requests)
    clock = time.perf_counter
    phases = times if times is not None else PhaseTimes()

    def fail(index: int, exc: Exception, stage: str) -> None:
        error = _as_error(exc, stage, name)
        if on_error is not None:
            on_error(error)
        outcomes[index] = error

    def finish(index: int, outputs: Payload) -> None:
        started = clock()
        try:
            outcomes[index] = model.postprocess(outputs, requests[index])
        except Exception as exc:
            fail(index, exc, "postprocess")
        phases.postprocess += clock() - started

    payloads: list[tuple[int, Payload]] = []
    started = clock()
    for i, request in enumerate(requests):
        try:
            if validate:
                model.validate(request)
                if model.supports_batching:  # batched below: inputs must share rows
                    shared_rows(((t.name, t.data) for t in request.inputs), name)
            payloads.append((i, model.preprocess(request)))
        except Exception as exc:
            fail(i, exc, "preprocess")
    phases.preprocess += clock() - started
    if len(payloads) > 1 and model.supports_batching:
        started = clock()
        try:
            split = predict_batch(model, [p for _, p in payloads], name=name)
        except Exception as exc:
            phases.predict += clock() - started
            log.warning(
                "batched predict failed; retrying requests one by one",
                extra={"model": name, "batch": len(payloads), "error": str(exc)},
            )
        else:
            phases.predict += clock() - started
            for (i, _), out in zip(payloads, split, strict=True):
                finish(i, out)
            payloads = []
    for i, payload in payloads:
        started = clock()
        try:
            out = model.predict(payload)
        except Exception as exc:
            fail(i, exc, "predict")
            continue
        finally:
            phases.predict += clock() - started
        finish(i, out)
    return [o if o is not None else InferenceFailed("no outcome") for o in outcomes]


def predict_batch(model: ModelAPI, payloads: list[Payload], *, name: str) -> list[Payload]:
    """Concatenate payloads on axis 0, predict once, split the outputs back by rows.

    Raises, computing nothing, when the payloads cannot be concatenated row for row:
    different keys, or arrays within one payload whose first dimensions differ (each key
    is concatenated on its own, so such a payload would shift its neighbours' rows).
    Requests are refused for that before they are queued; this guards what a model's
    `preprocess` returns, and `run_batch` then computes the requests one by one."""
    names = payloads[0].keys()
    if any(p.keys() != names for p in payloads):
        raise InvalidInput("requests in a batch carry different inputs")
    for payload in payloads:
        shared_rows(payload.items(), name)
    merged = {key: np.concatenate([p[key] for p in payloads]) for key in names}
    outputs = model.predict(merged)
    sizes = [model.batch_size(p) for p in payloads]
    total = sum(sizes)
    bounds = np.cumsum(sizes)[:-1]
    split: list[Payload] = [{} for _ in payloads]
    for key, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != total:
            raise InferenceFailed(
                f"output {key!r} has {array.shape[0] if array.ndim else 0} rows for a "
                f"batch of {total}; cannot split it back"
            )
        for part, piece in zip(split, np.split(array, bounds), strict=True):
            part[key] = piece
    return split


def _as_error(exc: Exception, stage: str, name: str) -> PodserveError:
    if isinstance(exc, PodserveError):
        return exc
    log.warning("model %s raised", stage, extra={"model": name, "error": repr(exc)})
    return InferenceFailed(f"model {name!r} failed in {stage}: {type(exc).__name__}: {exc}")
