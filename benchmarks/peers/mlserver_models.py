"""W2 as an MLServer 1.7.1 custom runtime (`MLModel`), for model-settings.json's
`implementation: mlserver_models.EmbeddingModel` (contenders.mlserver_settings writes it;
the process finds this module through PYTHONPATH). W1 needs none: the joblib MLP is
served by the stock `mlserver_sklearn.SKLearnModel`.

Adaptive batching happens before `predict`: MLServer's AdaptiveBatcher concatenates the
queued requests' inputs along the first axis and splits the outputs back
(mlserver/batching/adaptive.py), so `predict` sees n texts and answers n embeddings.
"""

from __future__ import annotations

from mlserver import MLModel
from mlserver.codecs import NumpyCodec, StringCodec
from mlserver.types import InferenceRequest, InferenceResponse
from models import W2, W2_OUTPUT


class EmbeddingModel(MLModel):
    async def load(self) -> bool:
        self._model = W2()
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        # Blocking inside `async def`, as MLServer's own runtimes do (mlserver_sklearn):
        # it runs in the inference worker process, not in the HTTP server's loop.
        texts = [str(t) for t in StringCodec.decode_input(payload.inputs[0])]
        embeddings = self._model(texts)
        return InferenceResponse(
            model_name=self.name,
            outputs=[NumpyCodec.encode_output(W2_OUTPUT, embeddings)],
        )
