"""Score one chunk of requests through a model's `ModelAPI` steps, the way the engine does:

    validate each → preprocess each → one predict on the concatenation → split →
    postprocess each

One bad request never fails its chunk-mates: a validate or preprocess error stays with
its request, and when the batched predict fails (or its outputs cannot be split back)
the requests are retried one at a time, so only the culprit gets the error.

Synchronous and free of I/O: the runner calls it, tests call it on any `ModelAPI`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from podserve.core.errors import InferenceFailed, InvalidInput, PodserveError
from podserve.core.tensors import InferRequest, Tensor
from podserve.runtimes.base import ModelAPI, Payload

log = logging.getLogger("podserve.batchjob")

Outcome = tuple[Tensor, ...] | PodserveError


def score(model: ModelAPI, requests: Sequence[InferRequest]) -> list[Outcome]:
    """An outcome per request, in order."""
    outcomes: list[Outcome | None] = [None] * len(requests)
    payloads: list[tuple[int, Payload]] = []
    for i, request in enumerate(requests):
        try:
            model.validate(request)
            payloads.append((i, model.preprocess(request)))
        except Exception as exc:
            outcomes[i] = _as_error(exc, "preprocess")
    if len(payloads) > 1 and model.supports_batching:
        try:
            split = _predict_batch(model, [p for _, p in payloads])
        except Exception as exc:
            log.warning(
                "batched predict failed; retrying lines one by one",
                extra={"batch": len(payloads), "error": str(exc)},
            )
        else:
            for (i, _), out in zip(payloads, split, strict=True):
                outcomes[i] = _postprocess(model, out, requests[i])
            payloads = []
    for i, payload in payloads:
        try:
            out = model.predict(payload)
        except Exception as exc:
            outcomes[i] = _as_error(exc, "predict")
            continue
        outcomes[i] = _postprocess(model, out, requests[i])
    return [o if o is not None else InferenceFailed("no outcome") for o in outcomes]


def _predict_batch(model: ModelAPI, payloads: list[Payload]) -> list[Payload]:
    names = payloads[0].keys()
    if any(p.keys() != names for p in payloads):
        raise InvalidInput("lines in a chunk carry different inputs")
    merged = {name: np.concatenate([p[name] for p in payloads]) for name in names}
    outputs = model.predict(merged)
    sizes = [model.batch_size(p) for p in payloads]
    total = sum(sizes)
    bounds = np.cumsum(sizes)[:-1]
    split: list[Payload] = [{} for _ in payloads]
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != total:
            raise InferenceFailed(
                f"output {name!r} has {array.shape[0] if array.ndim else 0} rows for a "
                f"batch of {total}; cannot split it back"
            )
        for part, piece in zip(split, np.split(array, bounds), strict=True):
            part[name] = piece
    return split


def _postprocess(model: ModelAPI, outputs: Payload, request: InferRequest) -> Outcome:
    try:
        return model.postprocess(outputs, request)
    except Exception as exc:
        return _as_error(exc, "postprocess")


def _as_error(exc: Exception, stage: str) -> PodserveError:
    if isinstance(exc, PodserveError):
        return exc
    return InferenceFailed(f"model failed in {stage}: {type(exc).__name__}: {exc}")
