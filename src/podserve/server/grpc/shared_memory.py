"""Triton's shared-memory extensions as gRPC messages (SystemSharedMemory* and
CudaSharedMemory* in tritonclient's grpc_service.proto): the same table and answers as
the REST routes (`server/routes_shm.py`); the servicer wraps each in its error mapping."""

from __future__ import annotations

from podserve.server.grpc._generated import inference_pb2 as pb
from podserve.shm import CudaSharedMemory, SystemSharedMemory


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
