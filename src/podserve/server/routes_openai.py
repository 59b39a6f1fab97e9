"""OpenAI-compatible routes. Requests become data-plane requests, so admission, batching,
drain and metrics apply unchanged; errors use OpenAI's error object."""

from __future__ import annotations

import time

from podserve.core.errors import InvalidInput
from podserve.dataplane.dataplane import DataPlane
from podserve.protocol.openai import (
    decode_embedding_request,
    encode_embedding_response,
    encode_model_list,
)
from podserve.repository import ModelState
from podserve.server.http import Request, Response


class OpenAIRoutes:
    def __init__(self, dataplane: DataPlane) -> None:
        self._dataplane = dataplane
        self._max_body_bytes = dataplane.settings.max_body_bytes
        self._started_s = int(time.time())

    async def models(self, request: Request) -> Response:
        names = sorted(
            {
                e.name
                for e in self._dataplane.repository.entries()
                if e.state is ModelState.READY or self._dataplane.settings.autoload
            }
        )
        return Response(200, encode_model_list(names, self._started_s))

    async def embeddings(self, request: Request) -> Response:
        body = await request.body(self._max_body_bytes)
        parsed, infer_request = decode_embedding_request(body)
        request.model = parsed.model
        response = await self._dataplane.infer(
            infer_request, endpoint="openai.embeddings", request_id=request.request_id
        )
        outputs = {t.name: t.data for t in response.outputs}
        if "embedding" not in outputs or "tokens" not in outputs:
            raise InvalidInput(
                f"model {parsed.model!r} is not an embedding model (it returns "
                f"{sorted(outputs)}, not 'embedding' and 'tokens')"
            )
        return Response(
            200, encode_embedding_response(parsed, outputs["embedding"], outputs["tokens"])
        )
