"""Score one chunk of requests through a model's `ModelAPI` steps, the way the engine does:

    validate each → preprocess each → one predict on the concatenation → split →
    postprocess each

One bad request never fails its chunk-mates: a validate or preprocess error stays with
its request, and when the batched predict fails (or its outputs cannot be split back)
the requests are retried one at a time, so only the culprit gets the error.

Synchronous and free of I/O: the runner calls it, tests call it on any `ModelAPI`.
"""

from __future__ import annotations

from collections.abc import Sequence

from podserve.core.tensors import InferRequest
from podserve.runtimes.base import ModelAPI
from podserve.runtimes.batch_call import Outcome, run_batch

__all__ = ["Outcome", "score"]


def score(model: ModelAPI, requests: Sequence[InferRequest], name: str = "model") -> list[Outcome]:
    """An outcome per request, in order."""
    return run_batch(model, requests, name=name, validate=True)
