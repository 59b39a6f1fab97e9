"""Triton's CUDA shared-memory extension on a machine without GPUs.

tritonclient's programs call these endpoints whether or not they use CUDA memory (to
clean up, or to check nothing is left registered), so they answer exactly as a Triton
built without GPU support does (src/shared_memory_manager.cc and http_server.cc in
github.com/triton-inference-server/server, the `#else` branches of TRITON_ENABLE_GPU):
registering is refused with a message that says why, unregistering what cannot exist
succeeds, and the status lists nothing. Triton keeps CUDA and system regions in one
table, so asking for the CUDA status of a system region says which kind it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from podserve.core.errors import InvalidInput, NotFound
from podserve.shm.regions import SystemSharedMemory


@dataclass(frozen=True, slots=True)
class CudaRegionStatus:
    name: str
    device_id: int
    byte_size: int


class CudaSharedMemory:
    """No GPUs: no CUDA region can ever be registered."""

    def __init__(self, system: SystemSharedMemory) -> None:
        self._system = system

    def register(self, name: str) -> None:
        if not name:
            raise InvalidInput("'region name' is necessary to register cuda shared memory region")
        raise InvalidInput(
            f"failed to register CUDA shared memory region: '{name}', GPUs not supported"
        )

    def unregister(self, name: str | None = None) -> None:
        """Nothing is registered, so there is nothing to unregister: success."""

    def status(self, name: str | None = None) -> list[CudaRegionStatus]:
        if not name:
            return []
        if any(region.name == name for region in self._system.status()):
            raise NotFound(
                f"The region named '{name}' is registered as system shared memory, "
                "not CUDA shared memory"
            )
        raise NotFound(f"Unable to find cuda shared memory region: '{name}'")
