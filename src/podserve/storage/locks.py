"""OS file locks (`flock`) on files in the cache.

flock locks belong to the open file, so the kernel drops them when the holder dies (even
by `kill -9` or the OOM killer): a crashed pod never leaves a stale lock behind. They work
between pods on one node that share a hostPath or emptyDir; they are not reliable on
network filesystems (NFS), which is why the cache must be on a node-local volume.

Lock files are never deleted: deleting one while another process waits on it would let a
third process lock a fresh file of the same name, and two holders would each think they
were alone.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType


class FileLock:
    """A shared or exclusive flock on `path`, created if missing."""

    __slots__ = ("_fd", "path", "shared")

    def __init__(self, path: Path, *, shared: bool = False) -> None:
        self.path = path
        self.shared = shared
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, *, blocking: bool = True) -> bool:
        """Take the lock; without `blocking`, return False at once if another holds it."""
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o664)
        op = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        try:
            fcntl.flock(fd, op if blocking else op | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            # Closing the descriptor releases the flock.
            os.close(fd)

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
