"""The digest of a model.

A model is a directory of files; a single-file model is a directory of one file, named as
the file is. Its **manifest** lists every regular file under the directory, one UTF-8 line

    <sha256 of the file, 64 lowercase hex> <size in bytes, decimal> <relative path>\\n

with `/` as the separator, sorted by the UTF-8 bytes of the relative path. The model's
digest is `sha256:` + the lowercase hex SHA-256 of the manifest's bytes. Path goes last on
the line so that any character but a newline may appear in it (a newline is refused).

Symlinks to files are hashed as the file they point to (a Hugging Face snapshot is made
of them); symlinked directories are not entered, so a link loop cannot hang the walk;
empty directories do not count. Files are streamed, never read whole into memory.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from podserve.storage.errors import DigestMismatch, InvalidModelURI, ModelNotFoundAtSource

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, slots=True, order=True)
class Digest:
    """`sha256:<hex>`; the only algorithm for now, named so another can follow."""

    hex: str
    algorithm: str = "sha256"

    @classmethod
    def parse(cls, text: str) -> Digest:
        algorithm, sep, hexpart = text.strip().partition(":")
        hexpart = hexpart.lower()
        if not sep or algorithm.lower() != "sha256" or not _HEX64.match(hexpart):
            raise InvalidModelURI(f"invalid digest {text!r}; expected sha256:<64 hex digits>")
        return cls(hexpart)

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.hex}"


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    path: str
    size_bytes: int
    sha256: str

    def line(self) -> str:
        return f"{self.sha256} {self.size_bytes} {self.path}\n"


@dataclass(frozen=True, slots=True)
class Manifest:
    """The files of a model, sorted; `digest` is defined by the module docstring."""

    entries: tuple[ManifestEntry, ...]

    @classmethod
    def of(cls, entries: Iterable[ManifestEntry]) -> Manifest:
        return cls(tuple(sorted(entries, key=lambda e: e.path.encode("utf-8"))))

    @property
    def total_size_bytes(self) -> int:
        return sum(e.size_bytes for e in self.entries)

    def text(self) -> str:
        return "".join(e.line() for e in self.entries)

    @property
    def digest(self) -> Digest:
        return Digest(hashlib.sha256(self.text().encode("utf-8")).hexdigest())

    def sizes(self) -> dict[str, int]:
        return {e.path: e.size_bytes for e in self.entries}


def file_sha256(path: Path) -> tuple[str, int]:
    """(hex sha256, size in bytes) of one file, streamed in chunks."""
    h = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK_BYTES):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def iter_model_files(root: Path) -> Iterator[tuple[str, Path]]:
    """(relative posix path, path) of every file the digest covers, unsorted."""
    if not root.exists():
        raise ModelNotFoundAtSource(f"no such file or directory: {root}")
    if not root.is_dir():
        yield root.name, root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            if "\n" in rel:
                raise InvalidModelURI(f"{path!r}: a newline in a file name cannot be digested")
            mode = path.stat().st_mode  # follows a symlink to its file
            if not stat.S_ISREG(mode):
                raise InvalidModelURI(f"{path} is not a regular file (or a link to one)")
            yield rel, path


def compute_manifest(root: Path) -> Manifest:
    """The manifest of the model at `root` (a directory, or a single file)."""
    entries = []
    for rel, path in iter_model_files(root):
        hexdigest, size = file_sha256(path)
        entries.append(ManifestEntry(rel, size, hexdigest))
    return Manifest.of(entries)


def artifacts_manifest(root: Path, config_name: str = "model.yaml") -> Manifest:
    """The manifest of a model directory without its top-level config file: what a
    `digest:` written inside that config pins (a file cannot hold its own hash)."""
    full = compute_manifest(root)
    return Manifest.of(e for e in full.entries if e.path != config_name)


def compute_digest(root: Path) -> Digest:
    return compute_manifest(root).digest


def verify(root: Path, expected: Digest, *, where: str | None = None) -> Manifest:
    """The manifest of `root`, or DigestMismatch when it does not hash to `expected`."""
    manifest = compute_manifest(root)
    if manifest.digest != expected:
        raise DigestMismatch(
            expected=str(expected), actual=str(manifest.digest), where=where or str(root)
        )
    return manifest


def sizes_match(root: Path, manifest: Manifest) -> bool:
    """A cheap check (no hashing): the same files with the same sizes as `manifest`."""
    try:
        found = {rel: path.stat().st_size for rel, path in iter_model_files(root)}
    except (OSError, ModelNotFoundAtSource, InvalidModelURI):
        return False
    return found == manifest.sizes()
