"""Shared memory between podserve and clients in the same pod: Triton's system
shared-memory extension (registered POSIX shared-memory regions, read and written in
place) and its CUDA counterpart as a machine without GPUs answers it.

Only `core` below it: the wire codecs (protocol/) turn region bytes into tensors, the
data plane owns one table per process, and the edges serve the endpoints.
"""

from podserve.shm.cuda import CudaRegionStatus, CudaSharedMemory
from podserve.shm.references import (
    SHARED_MEMORY_BYTE_SIZE,
    SHARED_MEMORY_OFFSET,
    SHARED_MEMORY_PARAMETERS,
    SHARED_MEMORY_REGION,
    RegionRef,
    region_ref,
    without_references,
)
from podserve.shm.regions import DEFAULT_SHM_DIR, RegionStatus, SystemSharedMemory

__all__ = [
    "DEFAULT_SHM_DIR",
    "SHARED_MEMORY_BYTE_SIZE",
    "SHARED_MEMORY_OFFSET",
    "SHARED_MEMORY_PARAMETERS",
    "SHARED_MEMORY_REGION",
    "CudaRegionStatus",
    "CudaSharedMemory",
    "RegionRef",
    "RegionStatus",
    "SystemSharedMemory",
    "region_ref",
    "without_references",
]
