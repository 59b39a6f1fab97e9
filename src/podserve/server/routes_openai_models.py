"""OpenAI's models endpoints: `GET /v1/models` (the list) and `GET /v1/models/{model}`
(one model, what the openai SDK's `client.models.retrieve` asks for).

Both answer from the models a client may name now (`DataPlane.served_model_names`), with
one `created` time, so a retrieved model is exactly its entry in the list. The id is the
whole rest of the path, `/` included (`{model:path}`): older openai SDKs send
`/v1/models/org/model` as is, newer ones as `org%2Fmodel`, which the server decodes to
the same path. podserve's own names hold no `/`, so such an id is a 404 like any other
name it does not serve.
"""

from __future__ import annotations

import time

import orjson

from podserve.core.errors import ModelNotFound
from podserve.dataplane import DataPlane
from podserve.protocol.openai import encode_model_list
from podserve.server.http import Request, Response

MODEL_PATH_PREFIX = "/v1/models/"


class OpenAIModelRoutes:
    def __init__(self, dataplane: DataPlane) -> None:
        self._dataplane = dataplane
        self._created_s = int(time.time())

    async def models(self, request: Request) -> Response:
        names = self._dataplane.served_model_names()
        return Response(200, encode_model_list(names, self._created_s))

    async def model(self, request: Request) -> Response:
        """The model named by the URL (`request.model`), or 404 model_not_found."""
        model_id = request.model
        if model_id not in self._dataplane.served_model_names():
            # Unknown: Triton's "Request for unknown model", as /v1 inference answers it.
            self._dataplane.check_model(model_id)
            raise ModelNotFound(f"model {model_id!r} is not loaded")
        return Response(200, orjson.dumps(model_object(model_id, self._created_s)))


def model_object(model_id: str, created_s: int) -> dict[str, object]:
    # The shape of each entry of encode_model_list (protocol/openai/models.py); the e2e
    # test holds the two equal.
    return {"id": model_id, "object": "model", "created": created_s, "owned_by": "podserve"}


__all__ = ["MODEL_PATH_PREFIX", "OpenAIModelRoutes"]
