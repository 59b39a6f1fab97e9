"""Model archives (`.tar`, `.tar.gz`/`.tgz`, `.tar.bz2`, `.tar.xz`, `.zip`) fetched over
http(s), unpacked safely into the staging area before the tree is digested.

KServe's storage initializer does the same for an http(s) URI whose name guesses as
`application/x-tar` or `application/zip` (`Storage._download_from_uri` →
`_unpack_archive_file`, python/kserve/kserve/storage/storage.py in kserve/kserve), users
expect it. KServe called `extractall` without checks until a path-traversal report
(huntr, 2024) made it pass tarfile's `filter="data"`; zip members still go through
`ZipFile.extractall`. Here every member is checked before a byte is written, with the same
rules for both formats:

* names: no absolute path, drive letter or backslash, no `..` that leaves the target;
* links: a symlink's target must stay inside the tree (relative, never absolute); a
  hardlink may only name a regular file unpacked before it; every link must resolve;
* types: regular files, directories and links only (no device, FIFO or socket);
* bounds: the unpacked bytes (counted as written, not as declared), the number of
  entries, and the unpacked/packed ratio (a zip bomb's signature; real weights compress
  1-3x), each with an error naming the bound and how to raise it;
* files are created with O_EXCL | O_NOFOLLOW under a parent whose real path is inside the
  target (a planted link cannot redirect a write), modes 0644/0755, no owner, no setuid.

The unpacking happens in the staging area's state directory and replaces the files
directory only once complete, so an interrupted or refused unpack never becomes the tree
that fetch.py verifies and publishes.
"""

from __future__ import annotations

import gzip
import lzma
import os
import posixpath
import shutil
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import unquote, urlsplit

from podserve.storage.errors import StorageError
from podserve.storage.uri import ModelURI, Scheme

_CHUNK_BYTES = 1 << 20
_MAX_LINK_TARGET_BYTES = 4096
_SUFFIXES = (
    (".tar.gz", "tar"),
    (".tgz", "tar"),
    (".tar.bz2", "tar"),
    (".tbz2", "tar"),
    (".tar.xz", "tar"),
    (".txz", "tar"),
    (".tar", "tar"),
    (".zip", "zip"),
)


class ArchiveError(StorageError):
    """The archive is unsafe (a path or link outside the target, a device file), over a
    bound, or not a readable archive. Nothing of it is published."""


@dataclass(frozen=True, slots=True)
class ArchiveLimits:
    """Bounds on what one archive may unpack to. `max_ratio` applies above
    `ratio_floor_bytes`, so that a small, very compressible archive is not refused."""

    max_unpacked_bytes: int = 256 * 1024**3
    max_entries: int = 100_000
    max_ratio: float = 200.0
    ratio_floor_bytes: int = 64 * 1024**2

    def byte_budget(self, packed_bytes: int) -> int:
        by_ratio = max(int(packed_bytes * self.max_ratio), self.ratio_floor_bytes)
        return min(self.max_unpacked_bytes, by_ratio)


@dataclass(frozen=True, slots=True)
class UnpackSummary:
    entries: int
    unpacked_bytes: int


def archive_format(uri: ModelURI) -> str | None:
    """`tar` or `zip` for an http(s) URI whose path names an archive, else None."""
    if uri.scheme not in (Scheme.HTTP, Scheme.HTTPS):
        return None
    name = unquote(urlsplit(uri.location).path).rsplit("/", 1)[-1].lower()
    return next((kind for suffix, kind in _SUFFIXES if name.endswith(suffix)), None)


def unpack_staged(
    files_dir: Path, work_dir: Path, kind: str, limits: ArchiveLimits
) -> UnpackSummary:
    """Replace the single archive in `files_dir` by its unpacked tree.

    `work_dir` (outside `files_dir`, same filesystem) receives the tree first; only a
    complete, checked tree is renamed into place, and the archive is deleted after it.
    """
    archives = [p for p in files_dir.iterdir() if p.is_file()] if files_dir.is_dir() else []
    if len(archives) != 1:
        raise ArchiveError(f"expected one downloaded archive in {files_dir}, found {len(archives)}")
    archive = archives[0]
    if work_dir.exists():
        shutil.rmtree(work_dir)  # an earlier, interrupted unpack: start it over
    work_dir.mkdir(parents=True)
    try:
        summary = unpack(archive, work_dir, kind, limits)
    except BaseException:
        shutil.rmtree(work_dir, ignore_errors=True)
        raise
    archive.unlink()
    shutil.rmtree(files_dir)
    os.replace(work_dir, files_dir)
    return summary


def unpack(archive: Path, target: Path, kind: str, limits: ArchiveLimits) -> UnpackSummary:
    """Unpack `archive` (`tar` or `zip`) into the empty directory `target`, checking
    every member (see the module docstring)."""
    writer = _Writer(target, limits, archive.stat().st_size, archive.name)
    try:
        if kind == "tar":
            _unpack_tar(archive, writer)
        elif kind == "zip":
            _unpack_zip(archive, writer)
        else:
            raise ValueError(f"unknown archive kind {kind!r}")
    except ArchiveError:
        raise
    except _UNREADABLE as exc:
        raise ArchiveError(f"{archive.name} is not a readable {kind} archive: {exc}") from exc
    writer.check_links()
    return UnpackSummary(writer.entries, writer.unpacked_bytes)


# What a damaged or truncated archive raises (other OSErrors, a full disk, propagate):
# zipfile's RuntimeError is "encrypted, password required"; EOFError a truncated stream.
_UNREADABLE = (
    tarfile.TarError,
    zipfile.BadZipFile,
    zlib.error,
    gzip.BadGzipFile,
    lzma.LZMAError,
    EOFError,
    RuntimeError,
)


# -- the two formats ---------------------------------------------------------------------


def _unpack_tar(archive: Path, writer: _Writer) -> None:
    # "r:*" detects the compression; iterating streams members one at a time, so a huge
    # archive is never listed whole in memory before the bounds can refuse it.
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            rel = writer.admit(member.name)
            if rel is None:
                continue
            if member.isdir():
                writer.directory(rel)
            elif member.isreg():
                source = tar.extractfile(member)
                if source is None:  # not reachable for a regular member
                    raise ArchiveError(f"{member.name}: no data in the archive")
                with source:
                    writer.file(rel, source, member.size, executable=bool(member.mode & 0o111))
            elif member.issym():
                writer.symlink(rel, member.linkname)
            elif member.islnk():
                writer.hardlink(rel, member.linkname)
            else:
                raise ArchiveError(
                    f"{member.name}: a {_tar_kind(member)} is not allowed in a model archive"
                )


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.ischr() or member.isblk():
        return "device file"
    if member.isfifo():
        return "FIFO"
    return f"member of type {member.type!r}"


def _unpack_zip(archive: Path, writer: _Writer) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        declared = sum(info.file_size for info in infos)
        writer.check_declared(declared, len(infos))
        for info in infos:
            rel = writer.admit(info.filename)
            if rel is None:
                continue
            mode = info.external_attr >> 16  # the Unix mode, when a Unix zip wrote one
            kind = stat.S_IFMT(mode)
            if info.is_dir():
                writer.directory(rel)
            elif kind == stat.S_IFLNK:
                if info.file_size > _MAX_LINK_TARGET_BYTES:
                    raise ArchiveError(f"{info.filename}: a symlink target that long is refused")
                writer.symlink(rel, zf.read(info).decode("utf-8", "replace"))
            elif kind in (0, stat.S_IFREG):
                with zf.open(info) as source:
                    writer.file(rel, source, info.file_size, executable=bool(mode & 0o111))
            else:
                raise ArchiveError(
                    f"{info.filename}: only files, directories and links may be in a model "
                    f"archive (mode {oct(kind)})"
                )


# -- checks and writes shared by both --------------------------------------------------


class _Writer:
    def __init__(self, target: Path, limits: ArchiveLimits, packed_bytes: int, name: str) -> None:
        self.target = target
        self.real_target = os.path.realpath(target)
        self.limits = limits
        self.name = name
        self.budget = limits.byte_budget(packed_bytes)
        self.packed_bytes = packed_bytes
        self.entries = 0
        self.unpacked_bytes = 0
        self.regular: set[str] = set()
        self.links: list[str] = []

    # names
    def admit(self, raw: str) -> str | None:
        """The member's safe relative path, or None for the archive's root (`./`)."""
        self.entries += 1
        if self.entries > self.limits.max_entries:
            raise ArchiveError(
                f"{self.name} has more than {self.limits.max_entries:,} entries "
                "(raise --max-unpacked-files if that is really the model)"
            )
        if "\\" in raw or "\x00" in raw or "\n" in raw:
            raise ArchiveError(f"{raw!r}: backslashes, NULs and newlines are refused in names")
        if raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
            raise ArchiveError(f"{raw!r}: an absolute path would be written outside the model")
        rel = posixpath.normpath(raw)
        if rel in (".", ""):
            return None
        if rel == ".." or rel.startswith("../"):
            raise ArchiveError(f"{raw!r}: a path that leaves the model directory is refused")
        return rel

    def _inside(self, rel: str) -> Path:
        """`target/rel`, after checking that its parent really is inside the target (no
        link, planted by an earlier member, leads the write elsewhere)."""
        path = self.target / rel
        parent = os.path.realpath(path.parent)
        if parent != self.real_target and not parent.startswith(self.real_target + os.sep):
            raise ArchiveError(f"{rel!r}: its directory resolves outside the model directory")
        return path

    # bounds
    def check_declared(self, declared_bytes: int, entries: int) -> None:
        """Refuse from the index alone when it already says too much (zip has one)."""
        if entries > self.limits.max_entries:
            raise ArchiveError(
                f"{self.name} lists {entries:,} entries, more than the bound of "
                f"{self.limits.max_entries:,} (--max-unpacked-files)"
            )
        if declared_bytes > self.budget:
            raise ArchiveError(self._too_big(declared_bytes, "declares"))

    def _too_big(self, n_bytes: int, verb: str) -> str:
        by_ratio = self.budget < self.limits.max_unpacked_bytes
        bound = (
            f"{self.limits.max_ratio:g}x its packed size of {self.packed_bytes:,} bytes "
            "(a zip bomb's signature)"
            if by_ratio
            else f"--max-unpacked-bytes {self.limits.max_unpacked_bytes:,}"
        )
        return f"{self.name} {verb} {n_bytes:,}+ unpacked bytes, over the bound of {bound}"

    # members
    def directory(self, rel: str) -> None:
        path = self._inside(rel)
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            raise ArchiveError(f"{rel!r}: a directory entry over an existing file or link")
        path.mkdir(parents=True, exist_ok=True)

    def file(self, rel: str, source: IO[bytes], declared: int, *, executable: bool) -> None:
        if self.unpacked_bytes + declared > self.budget:
            raise ArchiveError(self._too_big(self.unpacked_bytes + declared, "would unpack"))
        path = self._inside(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path = self._inside(rel)  # again: mkdir may have walked through a link
        with self._create(path, rel, 0o755 if executable else 0o644) as out:
            while chunk := source.read(_CHUNK_BYTES):
                self.unpacked_bytes += len(chunk)
                if self.unpacked_bytes > self.budget:  # counted as written, not as declared
                    raise ArchiveError(self._too_big(self.unpacked_bytes, "unpacks"))
                out.write(chunk)
        self.regular.add(rel)

    @contextmanager
    def _create(self, path: Path, rel: str, mode: int) -> Iterator[IO[bytes]]:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags, mode)
        except FileExistsError:
            raise ArchiveError(f"{rel!r} appears twice in the archive") from None
        with os.fdopen(fd, "wb") as out:
            yield out
        os.chmod(path, mode)  # the umask must not decide; no setuid/setgid ever

    def symlink(self, rel: str, link_target: str) -> None:
        if not link_target or link_target.startswith("/") or "\\" in link_target:
            raise ArchiveError(f"{rel!r}: a link to {link_target!r} (absolute) is refused")
        path = self._inside(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path = self._inside(rel)
        # Resolved from the link's real directory, not its name: `a/up -> ..` then
        # `a/up/up -> ..` looks local by name and lands one level above the tree.
        resolved = os.path.normpath(os.path.join(os.path.realpath(path.parent), link_target))
        if resolved != self.real_target and not resolved.startswith(self.real_target + os.sep):
            raise ArchiveError(
                f"{rel!r}: a link to {link_target!r} points outside the model directory"
            )
        try:
            os.symlink(link_target, path)
        except FileExistsError:
            raise ArchiveError(f"{rel!r} appears twice in the archive") from None
        self.links.append(rel)

    def hardlink(self, rel: str, link_target: str) -> None:
        source = self.admit(link_target)
        self.entries -= 1  # the name was checked, not a new entry
        if source is None or source not in self.regular:
            raise ArchiveError(
                f"{rel!r}: a hard link to {link_target!r}, which is not a file unpacked "
                "before it inside the model directory"
            )
        size = (self.target / source).stat().st_size
        if self.unpacked_bytes + size > self.budget:
            raise ArchiveError(self._too_big(self.unpacked_bytes + size, "would unpack"))
        self.unpacked_bytes += size  # the digest reads it once more
        path = self._inside(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(self.target / source, self._inside(rel), follow_symlinks=False)
        except FileExistsError:
            raise ArchiveError(f"{rel!r} appears twice in the archive") from None
        self.regular.add(rel)

    def check_links(self) -> None:
        """Every symlink resolves, inside the tree (a chain of links included)."""
        for rel in self.links:
            real = os.path.realpath(self.target / rel)
            if not real.startswith(self.real_target + os.sep) or not os.path.exists(real):
                raise ArchiveError(f"{rel!r}: the link does not resolve inside the model")
