"""Triton's system shared-memory extension: the table of regions a client registered.

A client in the same pod (a pre/post-processing sidecar, `podserve batch` beside the
server) creates a POSIX shared-memory object, registers a window of it under a name,
then names `(region, offset, byte_size)` in an inference request instead of sending the
tensor's bytes; the server reads inputs from, and writes outputs into, the mapping.

Modelled on Triton's `SharedMemoryManager` (src/shared_memory_manager.cc in
github.com/triton-inference-server/server): the key is what `shm_open` takes ("/name",
the object `/dev/shm/name` on Linux); registering maps `[offset, offset + byte_size)` of
it read-write, after checking the object is that large; a duplicate name is
ALREADY_EXISTS; an unknown name is NOT_FOUND for status and inference, and a no-op for
unregister; every access is bounds-checked against the registered size. The messages
keep Triton's wording, which clients match, and add the numbers.

Where podserve differs, on purpose:
- A key that cannot be opened is the client's mistake: InvalidInput (400), where Triton
  answers INTERNAL (500). Keys are confined to the shared-memory directory: a key with
  a second "/" or "..", a symlink, or anything but a regular file is refused.
- The offset need not be page-aligned (Triton passes it to mmap as is): the mapping
  starts at the page below it.
- A region unregistered while an in-flight request still reads or writes it stays
  mapped until that request lets go (Triton defers the same way); the table forgets it
  at once, so the name can be registered again.
- The table holds at most `max_regions` regions (registered, or unregistered but still
  mapped): each holds a file descriptor and a mapping for as long as it is registered,
  and nothing else bounds how many a client registers. Unbounded, ~10,000 registrations
  used up the process's descriptors (RLIMIT_NOFILE), after which every new TCP
  connection, probes included, was reset. Past the cap, registering is refused
  (InvalidInput, 400, naming the limit) until the client unregisters some. The cap is
  also held under a quarter of the descriptor limit, so connections and model files
  keep the rest (docs/operations.md, "Shared memory").
- Touching a mapped page past the end of its file is SIGBUS, which would kill the
  server: a client that shrinks its object after registering (ftruncate) is refused at
  the next access (one fstat per view, ~1 us). A shrink between that check and the
  model's read is still possible; only the client's own pod can do it.

Lifetime: `close()` (at shutdown) unregisters everything. Views handed out by `view()`
keep their mapping alive; a mapping whose views are gone is unmapped at the next call
that touches the table.
"""

from __future__ import annotations

import mmap
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from podserve.core.descriptors import within_descriptor_share
from podserve.core.errors import AlreadyExists, InvalidInput, NotFound

# Where Linux's shm_open keeps its objects (glibc: SHM_DIR, a tmpfs).
DEFAULT_SHM_DIR = Path("/dev/shm")
_NAME_MAX = 255
# Registered regions at most (the module's doc); Triton has no such bound.
MAX_REGIONS = 1024


def default_max_regions() -> int:
    """`MAX_REGIONS`, or a quarter of the soft descriptor limit when that is lower."""
    return within_descriptor_share(MAX_REGIONS)


@dataclass(frozen=True, slots=True)
class RegionStatus:
    """One registered region, as the status endpoints report it."""

    name: str
    key: str
    offset: int
    byte_size: int


class _Mapping:
    """One registered window of a shared-memory object, mapped read-write."""

    def __init__(self, status: RegionStatus, mapped: mmap.mmap, start: int, fd: int) -> None:
        self.status = status
        self._mmap = mapped
        self._fd = fd  # kept to see the object's size at each access
        # The window inside the mapping, which begins at the page below `offset`.
        self._window = memoryview(mapped)[start : start + status.byte_size]

    def view(self, offset: int, byte_size: int) -> memoryview:
        end = self.status.offset + self.status.byte_size
        size = os.fstat(self._fd).st_size
        if size < end:
            raise InvalidInput(
                f"shared memory region '{self.status.name}': '{self.status.key}' shrank to "
                f"{size} bytes, below the {end} it was registered with"
            )
        return self._window[offset : offset + byte_size]

    def try_close(self) -> bool:
        """Unmap; False while some view of it is still alive (then try again later)."""
        try:
            self._window.release()
            self._mmap.close()
        except BufferError:  # an in-flight request still holds a view
            return False
        os.close(self._fd)
        return True


class SystemSharedMemory:
    """The registered regions of this process, by name. Thread-safe."""

    def __init__(self, directory: Path = DEFAULT_SHM_DIR, max_regions: int | None = None) -> None:
        self._directory = directory
        self.max_regions = default_max_regions() if max_regions is None else max_regions
        self._regions: dict[str, _Mapping] = {}
        # Unregistered while in use: unmapped as soon as their last view is gone.
        self._retiring: list[_Mapping] = []
        self._lock = threading.Lock()

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        if not name:
            raise InvalidInput("'region name' is necessary to register system shared memory region")
        _check_size("offset", offset, minimum=0)
        _check_size("byte_size", byte_size, minimum=1)
        path = self._path(key)
        with self._lock:
            self._reap()
            if name in self._regions:
                raise AlreadyExists(f"shared memory region '{name}' already in manager")
            held = len(self._regions) + len(self._retiring)
            if held >= self.max_regions:
                raise InvalidInput(
                    f"failed to register shared memory region '{name}': {held} regions are "
                    f"registered or still in use, the most this server holds "
                    f"(max_regions={self.max_regions}); unregister some first"
                )
            self._regions[name] = _map(name, key, path, offset, byte_size)

    def unregister(self, name: str | None = None) -> None:
        """Unregister one region, or every region when `name` is empty. A name that is
        not registered is not an error (Triton's behaviour)."""
        with self._lock:
            names = [name] if name else list(self._regions)
            for each in names:
                region = self._regions.pop(each, None)
                if region is not None and not region.try_close():
                    self._retiring.append(region)
            self._reap()

    def status(self, name: str | None = None) -> list[RegionStatus]:
        """Every region, sorted by name, or the one named (NotFound if it is not)."""
        with self._lock:
            self._reap()
            if not name:
                return [self._regions[n].status for n in sorted(self._regions)]
            region = self._regions.get(name)
            if region is None:
                raise NotFound(f"Unable to find system shared memory region: '{name}'")
            return [region.status]

    def view(self, name: str, offset: int, byte_size: int) -> memoryview:
        """`byte_size` bytes at `offset` inside the region, bounds-checked against the
        size it was registered with. Writable; it keeps the mapping alive while held."""
        _check_size("shared_memory_offset", offset, minimum=0)
        _check_size("shared_memory_byte_size", byte_size, minimum=0)
        with self._lock:
            region = self._regions.get(name)
            if region is None:
                raise NotFound(f"Unable to find shared memory region: '{name}'")
            size = region.status.byte_size
            if offset >= size:
                raise InvalidInput(
                    f"Invalid offset for shared memory region: '{name}': offset {offset} "
                    f"is past its {size} bytes"
                )
            if offset + byte_size > size:
                raise InvalidInput(
                    f"Invalid offset + byte size for shared memory region: '{name}': "
                    f"{offset} + {byte_size} exceeds its {size} bytes"
                )
            return region.view(offset, byte_size)

    def close(self) -> None:
        """Unregister every region (at shutdown)."""
        self.unregister()

    @property
    def retiring(self) -> int:
        """Unregistered regions still mapped because a request holds a view of them."""
        with self._lock:
            self._reap()
            return len(self._retiring)

    def _reap(self) -> None:
        self._retiring = [region for region in self._retiring if not region.try_close()]

    def _path(self, key: str) -> Path:
        """The file behind a shm_open key ("/name" or "name"), confined to the directory."""
        if type(key) is not str or not key:
            raise InvalidInput("Shared memory register request has no 'key' field")
        base = key[1:] if key.startswith("/") else key
        if not base or "/" in base or "\0" in base or base in (".", "..") or len(base) > _NAME_MAX:
            raise InvalidInput(
                f"invalid shared memory key {key!r}: expected '/name' with no other '/', "
                f"as shm_open takes it"
            )
        return self._directory / base


def _check_size(field: str, value: object, *, minimum: int) -> None:
    # bool is an int to Python, never to the protocol
    if type(value) is not int or value < minimum:
        raise InvalidInput(f"'{field}' must be an integer >= {minimum}, got {value!r}")


def _map(name: str, key: str, path: Path, offset: int, byte_size: int) -> _Mapping:
    where = f"failed to register shared memory region '{name}'"
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidInput(
            f"Unable to open shared memory region: '{key}': {exc.strerror or exc}"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInput(f"{where}: '{key}' is not a shared memory object")
        if offset + byte_size > info.st_size:
            raise InvalidInput(
                f"{where}: invalid args: offset {offset} + byte_size {byte_size} exceeds "
                f"the {info.st_size} bytes of '{key}'"
            )
        # mmap's offset must be a multiple of the allocation granularity (a page).
        start = offset % mmap.ALLOCATIONGRANULARITY
        mapped = mmap.mmap(
            fd,
            start + byte_size,
            flags=mmap.MAP_SHARED,
            prot=mmap.PROT_READ | mmap.PROT_WRITE,
            offset=offset - start,
        )
    except BaseException:
        os.close(fd)
        raise
    return _Mapping(RegionStatus(name, key, offset, byte_size), mapped, start, fd)
