"""Triton's shared-memory extensions as gRPC methods (SystemSharedMemory* and
CudaSharedMemory* in tritonclient's grpc_service.proto): the same table and answers as
the REST routes (`server/routes_shm.py`). `SharedMemoryRpcs` is a part of the servicer,
which supplies the data plane and its one error mapping (`_guard`)."""

from __future__ import annotations

import abc
from contextlib import AbstractAsyncContextManager
from typing import Any

from podserve.dataplane import DataPlaneAPI
from podserve.server.grpc._generated import inference_pb2 as pb
from podserve.shm import CudaSharedMemory, SystemSharedMemory

Context = Any  # grpc.aio.ServicerContext; grpc ships no types


class SharedMemoryRpcs(abc.ABC):
    _dataplane: DataPlaneAPI

    @abc.abstractmethod
    def _guard(self, context: Context, method: str) -> AbstractAsyncContextManager[None]:
        """Ends the RPC with the status the error raised in its body maps to."""

    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Context
    ) -> pb.SystemSharedMemoryStatusResponse:
        async with self._guard(context, "SystemSharedMemoryStatus"):
            return system_status(self._dataplane.shared_memory, request)

    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Context
    ) -> pb.SystemSharedMemoryRegisterResponse:
        async with self._guard(context, "SystemSharedMemoryRegister"):
            return system_register(self._dataplane.shared_memory, request)

    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Context
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        async with self._guard(context, "SystemSharedMemoryUnregister"):
            return system_unregister(self._dataplane.shared_memory, request)

    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Context
    ) -> pb.CudaSharedMemoryStatusResponse:
        async with self._guard(context, "CudaSharedMemoryStatus"):
            return cuda_status(self._dataplane.cuda_shared_memory, request)

    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Context
    ) -> pb.CudaSharedMemoryRegisterResponse:
        async with self._guard(context, "CudaSharedMemoryRegister"):
            return cuda_register(self._dataplane.cuda_shared_memory, request)

    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Context
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        async with self._guard(context, "CudaSharedMemoryUnregister"):
            return cuda_unregister(self._dataplane.cuda_shared_memory, request)


def system_status(
    table: SystemSharedMemory, request: pb.SystemSharedMemoryStatusRequest
) -> pb.SystemSharedMemoryStatusResponse:
    response = pb.SystemSharedMemoryStatusResponse()
    for region in table.status(request.name):
        response.regions[region.name].CopyFrom(
            pb.SystemSharedMemoryStatusResponse.RegionStatus(
                name=region.name, key=region.key, offset=region.offset, byte_size=region.byte_size
            )
        )
    return response


def system_register(
    table: SystemSharedMemory, request: pb.SystemSharedMemoryRegisterRequest
) -> pb.SystemSharedMemoryRegisterResponse:
    table.register(request.name, request.key, request.offset, request.byte_size)
    return pb.SystemSharedMemoryRegisterResponse()


def system_unregister(
    table: SystemSharedMemory, request: pb.SystemSharedMemoryUnregisterRequest
) -> pb.SystemSharedMemoryUnregisterResponse:
    table.unregister(request.name)
    return pb.SystemSharedMemoryUnregisterResponse()


def cuda_status(
    table: CudaSharedMemory, request: pb.CudaSharedMemoryStatusRequest
) -> pb.CudaSharedMemoryStatusResponse:
    response = pb.CudaSharedMemoryStatusResponse()
    for region in table.status(request.name):
        response.regions[region.name].CopyFrom(
            pb.CudaSharedMemoryStatusResponse.RegionStatus(
                name=region.name, device_id=region.device_id, byte_size=region.byte_size
            )
        )
    return response


def cuda_register(
    table: CudaSharedMemory, request: pb.CudaSharedMemoryRegisterRequest
) -> pb.CudaSharedMemoryRegisterResponse:
    table.register(request.name)  # always refused: no GPUs
    return pb.CudaSharedMemoryRegisterResponse()


def cuda_unregister(
    table: CudaSharedMemory, request: pb.CudaSharedMemoryUnregisterRequest
) -> pb.CudaSharedMemoryUnregisterResponse:
    table.unregister(request.name)
    return pb.CudaSharedMemoryUnregisterResponse()
