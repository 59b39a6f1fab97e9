"""The data plane owns the process's region table and unmaps every region when it
closes at shutdown (the runner awaits `DataPlane.close()` after the drain)."""

from __future__ import annotations

import asyncio
from multiprocessing import shared_memory
from pathlib import Path

from podserve.config.settings import ServerSettings
from podserve.dataplane.build import build_dataplane


def _maps() -> str:
    return Path("/proc/self/maps").read_text()


def _mapped(name: str) -> bool:
    return f"/dev/shm/{name}" in _maps()


async def test_close_unmaps_every_registered_region() -> None:
    dataplane = build_dataplane(ServerSettings(), asyncio.get_running_loop())
    created = [shared_memory.SharedMemory(create=True, size=4096) for _ in range(2)]
    try:
        for i, region in enumerate(created):
            dataplane.shared_memory.register(f"r{i}", "/" + region.name, 0, 4096)
        # The server's own mapping, beside the client's: two lines per object.
        maps = _maps()
        assert all(maps.count(f"/dev/shm/{r.name}") == 2 for r in created)
        assert "system_shared_memory" in dataplane.server_metadata().extensions
        await dataplane.close()
        maps = _maps()
        assert all(maps.count(f"/dev/shm/{r.name}") == 1 for r in created)
        assert dataplane.shared_memory.status() == []
    finally:
        for region in created:
            region.close()
            region.unlink()
        assert not any(_mapped(r.name) for r in created)
