"""Triton's shared-memory extensions over REST (docs/protocol/extension_shared_memory.md
in github.com/triton-inference-server/server; the handlers follow HandleSystemSharedMemory
and HandleCudaSharedMemory in its src/http_server.cc):

    GET  /v2/systemsharedmemory[/region/{name}]/status
    POST /v2/systemsharedmemory/region/{name}/register     {"key", "offset", "byte_size"}
    POST /v2/systemsharedmemory[/region/{name}]/unregister
    and the same under /v2/cudasharedmemory, answered as without GPUs.

The table is the data plane's; this module only moves bytes, at most
`CONTROL_BODY_BYTES` of them per request (server/http.py): the bodies are a few dozen
bytes and are parsed on the event loop, where 2.7 MB of 900,000 JSON values held it
0.8 s. A region's name is the
path between `region/` and the action, decoded, so it may hold a "/".
"""

from __future__ import annotations

from podserve.dataplane import DataPlane
from podserve.protocol.v2.shared_memory import (
    cuda_status_json,
    decode_system_register,
    system_status_json,
)
from podserve.server.http import Request, Response, control_body, json_response

REGION = "region"


class SharedMemoryRoutes:
    def __init__(self, dataplane: DataPlane) -> None:
        self._system = dataplane.shared_memory
        self._cuda = dataplane.cuda_shared_memory
        self._max_body_bytes = dataplane.edge.max_body_bytes

    async def system_status(self, request: Request) -> Response:
        regions = self._system.status(request.path_params.get(REGION))
        return json_response(200, system_status_json(regions))

    async def system_register(self, request: Request) -> Response:
        body = decode_system_register(await self._body(request, "shared memory register"))
        self._system.register(request.path_params[REGION], body.key, body.offset, body.byte_size)
        return json_response(200, {})

    async def system_unregister(self, request: Request) -> Response:
        await self._body(request, "shared memory unregister")
        self._system.unregister(request.path_params.get(REGION))
        return json_response(200, {})

    async def cuda_status(self, request: Request) -> Response:
        return json_response(
            200, cuda_status_json(self._cuda.status(request.path_params.get(REGION)))
        )

    async def cuda_register(self, request: Request) -> Response:
        # Without GPUs the body is never looked at: registration fails whatever it says.
        await self._body(request, "CUDA shared memory register")
        self._cuda.register(request.path_params[REGION])
        return json_response(200, {})

    async def cuda_unregister(self, request: Request) -> Response:
        await self._body(request, "CUDA shared memory unregister")
        self._cuda.unregister(request.path_params.get(REGION))
        return json_response(200, {})

    async def _body(self, request: Request, what: str) -> bytes:
        return await control_body(request, self._max_body_bytes, what)
