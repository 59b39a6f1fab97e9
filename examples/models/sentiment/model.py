"""Bring your own code: a sentiment model for short English texts.

It shows the whole `ModelAPI` contract on a model whose wire format differs from its
math: clients send strings (BYTES) and get back a label (BYTES) and a score (FP32);
the model itself is a linear classifier on hashed word features.

    validate      per request, before queueing: the base class checks "text" against
                  the inputs declared in model.yaml (not overridden here)
    preprocess    per request: decode, tokenize, hash words and word pairs into a
                  fixed-size float32 feature vector per text
    predict       per batch: one matrix-vector product and a sigmoid for every text
                  of every request in the batch
    postprocess   per request: turn scores into labels, return the requested outputs

The weights (`weights.npy`) are trained by scripts/make_example_models.py, which uses
`featurize` below so training and serving can never disagree about the features.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from podserve.core.errors import InvalidInput
from podserve.core.tensors import InferRequest, Tensor
from podserve.runtimes import LoadContext, ModelAPI, Payload

_WORD = re.compile(r"[a-z']+")


def featurize(texts: Iterable[str], n_features: int) -> npt.NDArray[np.float32]:
    """Hash each text's words and adjacent word pairs into `n_features` signed buckets
    (pairs let the model see "not good"), then scale each row to unit length."""
    rows = []
    for text in texts:
        row = np.zeros(n_features, dtype=np.float32)
        words = _WORD.findall(text.lower())
        for token in [*words, *(f"{a} {b}" for a, b in itertools.pairwise(words))]:
            # crc32, not hash(): Python salts str hashes per process.
            h = zlib.crc32(token.encode())
            row[h % n_features] += 1.0 if (h >> 31) & 1 else -1.0
        norm = float(np.linalg.norm(row))
        rows.append(row / norm if norm else row)
    if not rows:
        return np.zeros((0, n_features), dtype=np.float32)
    return np.stack(rows)


class SentimentModel(ModelAPI):
    def load(self, context: LoadContext) -> None:
        # weights.npy holds the coefficients followed by the intercept.
        weights = np.load(context.artifact_path).astype(np.float32)
        self.coef = weights[:-1]
        self.intercept = float(weights[-1])
        self.threshold = float(context.config.parameters.get("threshold", 0.5))

    def preprocess(self, request: InferRequest) -> Payload:
        # The engine already ran `validate`, which checks the declared input "text" is
        # present, BYTES and one-dimensional, before the request was queued.
        texts = request.input_map()["text"].data
        try:
            decoded = [bytes(t).decode("utf-8") for t in texts]
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"input 'text' must be UTF-8 text: {exc}") from None
        return {"features": featurize(decoded, self.coef.shape[0])}

    def predict(self, batch: Payload) -> Payload:
        logits = batch["features"] @ self.coef + self.intercept
        return {"score": (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)}

    def postprocess(self, outputs: Payload, request: InferRequest) -> tuple[Tensor, ...]:
        score = outputs["score"]
        label = np.where(score >= self.threshold, b"positive", b"negative").astype(object)
        # The base class returns only the outputs the client asked for.
        return super().postprocess({"label": label, "score": score}, request)
