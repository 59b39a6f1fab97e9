"""Archives over http(s): real .tar.gz/.tgz/.tar/.zip files served by a real local HTTP
server, unpacked into the cache with the unpacked tree's digest; malicious archives
(path traversal, absolute paths, links out, device files, a zip bomb, too many files,
truncated data) are refused with a clear error, and nothing of them is ever published."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from podserve.storage import ModelCache, compute_digest, fetch_model, parse_model_uri
from podserve.storage.archive import ArchiveError, ArchiveLimits, archive_format
from podserve.storage.cache import key_for
from tests.storage.support import ServerState

FILES = {
    "model.yaml": b"name: m\nruntime: sklearn\n",
    "weights/model.safetensors": bytes(range(256)) * 64,
    "tokenizer/vocab.txt": "ünïcode\n".encode() * 10,
}


def _tree(root: Path, files: dict[str, bytes] = FILES) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def _tar(mode: str, members: Callable[[tarfile.TarFile], None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:  # type: ignore[call-overload]  # mode is a literal at each call
        members(tar)
    return buffer.getvalue()


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def _add_special(tar: tarfile.TarFile, name: str, kind: bytes, linkname: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    tar.addfile(info)


def _good_tar(mode: str) -> bytes:
    def members(tar: tarfile.TarFile) -> None:
        _add_special(tar, "./", tarfile.DIRTYPE)
        for rel, data in FILES.items():
            _add_file(tar, f"./{rel}", data)

    return _tar(mode, members)


def _zip(entries: Callable[[zipfile.ZipFile], None]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        entries(zf)
    return buffer.getvalue()


def _good_zip() -> bytes:
    def entries(zf: zipfile.ZipFile) -> None:
        for rel, data in FILES.items():
            zf.writestr(rel, data)

    return _zip(entries)


def _serve(state: ServerState, base: str, name: str, data: bytes) -> str:
    state.put(f"/{name}", data)
    return f"{base}/{name}"


def _nothing_published(cache_dir: Path, url: str) -> bool:
    cache = ModelCache(cache_dir)
    return cache.lookup(key_for(parse_model_uri(url)).name) is None


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("model.tar.gz", _good_tar("w:gz")),
        ("model.tgz", _good_tar("w:gz")),
        ("model.tar", _good_tar("w")),
        ("model.tar.xz", _good_tar("w:xz")),
        ("model.zip", _good_zip()),
    ],
)
def test_archives_unpack_and_the_digest_is_the_unpacked_trees(
    http_server: tuple[str, ServerState], tmp_path: Path, name: str, data: bytes
) -> None:
    base, state = http_server
    url = _serve(state, base, name, data)
    packed_from = compute_digest(_tree(tmp_path / "packed-from"))  # `podserve digest <dir>`
    result = fetch_model(url, digest=str(packed_from), cache_dir=tmp_path / "cache")
    assert result.lease is not None
    result.lease.release()
    assert result.digest == packed_from
    for rel, content in FILES.items():
        assert (result.path / rel).read_bytes() == content
    assert not (result.path / name).exists()  # the archive itself is not part of the model
    assert sorted(p.relative_to(result.path).as_posix() for p in result.path.rglob("*")) == [
        "model.yaml",
        "tokenizer",
        "tokenizer/vocab.txt",
        "weights",
        "weights/model.safetensors",
    ]
    again = fetch_model(url, digest=str(packed_from), cache_dir=tmp_path / "cache")
    assert again.from_cache
    assert again.lease is not None
    again.lease.release()
    assert len(state.gets(f"/{name}")) == 1


def test_a_pin_of_the_archive_bytes_is_a_mismatch_and_nothing_is_published(
    http_server: tuple[str, ServerState], tmp_path: Path
) -> None:
    import hashlib

    from podserve.storage import DigestMismatch

    base, state = http_server
    data = _good_tar("w:gz")
    url = _serve(state, base, "m.tar.gz", data)
    with pytest.raises(DigestMismatch):
        fetch_model(url, digest=f"sha256:{hashlib.sha256(data).hexdigest()}", cache_dir=tmp_path)
    assert not list((tmp_path / "entries").glob("sha256-*"))


def test_in_tree_links_are_kept_and_digested_as_their_files(
    http_server: tuple[str, ServerState], tmp_path: Path
) -> None:
    base, state = http_server

    def members(tar: tarfile.TarFile) -> None:
        _add_file(tar, "weights/a.bin", b"A" * 100)
        _add_special(tar, "current.bin", tarfile.SYMTYPE, "weights/a.bin")
        _add_special(tar, "weights/b.bin", tarfile.LNKTYPE, "weights/a.bin")
        _add_file(tar, "run.sh", b"#!/bin/sh\n", mode=0o4755)  # setuid must not survive

    url = _serve(state, base, "links.tar.gz", _tar("w:gz", members))
    result = fetch_model(url, cache_dir=tmp_path)
    assert result.lease is not None
    result.lease.release()
    assert (result.path / "current.bin").is_symlink()
    assert (result.path / "current.bin").read_bytes() == b"A" * 100
    assert (result.path / "weights/b.bin").read_bytes() == b"A" * 100
    assert stat.S_IMODE((result.path / "run.sh").stat().st_mode) == 0o755
    expected = compute_digest(
        _tree(
            tmp_path / "expected",
            {
                "weights/a.bin": b"A" * 100,
                "current.bin": b"A" * 100,
                "weights/b.bin": b"A" * 100,
                "run.sh": b"#!/bin/sh\n",
            },
        )
    )
    assert result.digest == expected


def _escape_via_symlink_dir(tar: tarfile.TarFile) -> None:
    _add_special(tar, "evil", tarfile.SYMTYPE, "../../..")
    _add_file(tar, "evil/tmp/pwned", b"x")


def _relative_then_write_through(tar: tarfile.TarFile) -> None:
    # each step looks local, together they leave: a link to a sibling link that escapes
    _add_special(tar, "a", tarfile.DIRTYPE)
    _add_special(tar, "a/up", tarfile.SYMTYPE, "..")
    _add_special(tar, "a/up/up", tarfile.SYMTYPE, "..")
    _add_file(tar, "a/up/up/pwned", b"x")


def _twice(tar: tarfile.TarFile) -> None:
    _add_file(tar, "m.bin", b"1")
    _add_file(tar, "m.bin", b"2")  # tarfile's extractall would let the second win


MALICIOUS_TARS: dict[str, tuple[Callable[[tarfile.TarFile], None], str]] = {
    "dotdot": (lambda t: _add_file(t, "../../pwned", b"x"), "leaves the model directory"),
    "dotdot-inside": (lambda t: _add_file(t, "a/../../pwned", b"x"), "leaves the model"),
    "absolute": (lambda t: _add_file(t, "/tmp/pwned", b"x"), "absolute path"),
    "symlink-absolute": (
        lambda t: _add_special(t, "passwd", tarfile.SYMTYPE, "/etc/passwd"),
        "absolute",
    ),
    "symlink-up": (
        lambda t: _add_special(t, "w/passwd", tarfile.SYMTYPE, "../../etc/passwd"),
        "points outside",
    ),
    "symlink-dir-escape": (_escape_via_symlink_dir, "points outside"),
    "link-chain": (_relative_then_write_through, "points outside"),
    "hardlink-out": (
        lambda t: _add_special(t, "h", tarfile.LNKTYPE, "../../etc/passwd"),
        "leaves the model directory",
    ),
    "hardlink-absolute": (
        lambda t: _add_special(t, "h", tarfile.LNKTYPE, "/etc/passwd"),
        "absolute path",
    ),
    "char-device": (lambda t: _add_special(t, "null", tarfile.CHRTYPE), "device file"),
    "block-device": (lambda t: _add_special(t, "sda", tarfile.BLKTYPE), "device file"),
    "fifo": (lambda t: _add_special(t, "pipe", tarfile.FIFOTYPE), "FIFO"),
    "duplicate": (_twice, "appears twice"),
    "dangling": (
        lambda t: _add_special(t, "gone", tarfile.SYMTYPE, "nowhere/file"),
        "does not resolve",
    ),
}


@pytest.mark.parametrize("case", sorted(MALICIOUS_TARS))
def test_malicious_tars_are_refused_and_nothing_lands_outside_or_is_published(
    http_server: tuple[str, ServerState], tmp_path: Path, case: str
) -> None:
    members, reason = MALICIOUS_TARS[case]
    base, state = http_server
    sandbox = tmp_path / "sandbox"  # the cache sits deep inside: `..`s land in here
    cache_dir = sandbox / "a" / "b" / "cache"
    url = _serve(state, base, f"{case}.tar.gz", _tar("w:gz", members))
    with pytest.raises(ArchiveError, match=reason):
        fetch_model(url, cache_dir=cache_dir)
    assert _nothing_published(cache_dir, url)
    outside = [
        p
        for p in sandbox.rglob("*")
        if cache_dir not in p.parents and p != cache_dir and p not in cache_dir.parents
    ]
    assert outside == []
    assert not Path("/tmp/pwned").exists()
    # no unpacked tree is left in the staging area for a later attempt to publish
    assert not list(cache_dir.glob("tmp/*/state/unpacking"))


def test_a_zip_bomb_over_the_bound_is_refused(
    http_server: tuple[str, ServerState], tmp_path: Path
) -> None:
    base, state = http_server
    bomb = _zip(lambda zf: zf.writestr("weights.bin", bytes(40 * 1024 * 1024)))
    assert len(bomb) < 100_000  # 40 MiB of zeros packs to ~40 KiB
    url = _serve(state, base, "bomb.zip", bomb)
    # The default ratio bound (200x above 64 MiB) lets 40 MiB through; explicit bounds:
    with pytest.raises(ArchiveError, match=r"bomb.zip declares 41,943,040\+ unpacked bytes"):
        fetch_model(
            url,
            cache_dir=tmp_path,
            archive_limits=ArchiveLimits(max_unpacked_bytes=10 * 1024 * 1024),
        )
    with pytest.raises(ArchiveError, match="200x its packed size"):
        fetch_model(url, cache_dir=tmp_path, archive_limits=ArchiveLimits(ratio_floor_bytes=1))
    assert _nothing_published(tmp_path, url)


def test_a_lying_tar_header_is_bounded_by_the_bytes_written(tmp_path: Path) -> None:
    """A tar's sizes are checked as written: a member that declares little but whose
    stream holds more cannot pass (tarfile reads exactly `size`, so the check is on the
    sum of real bytes)."""

    def members(tar: tarfile.TarFile) -> None:
        for i in range(5):
            _add_file(tar, f"part{i}.bin", bytes(1024 * 1024))

    archive = tmp_path / "m.tar.gz"
    archive.write_bytes(_tar("w:gz", members))
    limits = ArchiveLimits(max_unpacked_bytes=3 * 1024 * 1024)
    from podserve.storage.archive import unpack

    target = tmp_path / "out"
    target.mkdir()
    with pytest.raises(ArchiveError, match="over the bound of --max-unpacked-bytes 3,145,728"):
        unpack(archive, target, "tar", limits)


def test_too_many_files_and_zip_specials_are_refused(tmp_path: Path) -> None:
    from podserve.storage.archive import unpack

    many = tmp_path / "many.zip"

    def twenty(zf: zipfile.ZipFile) -> None:
        for i in range(20):
            zf.writestr(f"f{i}", b"")

    many.write_bytes(_zip(twenty))
    target = tmp_path / "t1"
    target.mkdir()
    with pytest.raises(ArchiveError, match="lists 20 entries, more than the bound of 10"):
        unpack(many, target, "zip", ArchiveLimits(max_entries=10))

    def link_out(zf: zipfile.ZipFile) -> None:
        info = zipfile.ZipInfo("passwd")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "../../../etc/passwd")

    linky = tmp_path / "link.zip"
    linky.write_bytes(_zip(link_out))
    target = tmp_path / "t2"
    target.mkdir()
    with pytest.raises(ArchiveError, match="points outside"):
        unpack(linky, target, "zip", ArchiveLimits())
    assert list(target.iterdir()) == []

    traversal = tmp_path / "slip.zip"
    traversal.write_bytes(_zip(lambda zf: zf.writestr("../../slip", b"x")))
    target = tmp_path / "t3"
    target.mkdir()
    with pytest.raises(ArchiveError, match="leaves the model directory"):
        unpack(traversal, target, "zip", ArchiveLimits())


def test_a_truncated_archive_is_a_clear_error(
    http_server: tuple[str, ServerState], tmp_path: Path
) -> None:
    base, state = http_server
    data = _good_tar("w:gz")
    url = _serve(state, base, "cut.tar.gz", data[: len(data) // 2])
    with pytest.raises(ArchiveError, match=r"cut\.tar\.gz is not a readable tar archive"):
        fetch_model(url, cache_dir=tmp_path)
    url = _serve(state, base, "text.zip", b"this is not a zip")
    with pytest.raises(ArchiveError, match=r"text\.zip is not a readable zip archive"):
        fetch_model(url, cache_dir=tmp_path)
    assert _nothing_published(tmp_path, url)


def test_only_http_archive_names_are_unpacked() -> None:
    assert archive_format(parse_model_uri("https://h/m.TAR.GZ?sig=1")) == "tar"
    assert archive_format(parse_model_uri("http://h/a/model.zip")) == "zip"
    assert archive_format(parse_model_uri("https://h/model.safetensors")) is None
    assert archive_format(parse_model_uri("https://h/model.gz")) is None  # one file, gzipped
    assert archive_format(parse_model_uri("/models/m.tar.gz")) is None  # served in place


def test_the_fetch_command_exits_6_with_a_json_error(
    http_server: tuple[str, ServerState], tmp_path: Path
) -> None:
    base, state = http_server
    url = _serve(state, base, "slip.tar.gz", _tar("w:gz", lambda t: _add_file(t, "../x", b"x")))
    env = {**os.environ, "PODSERVE_LOG_FORMAT": "json"}
    result = subprocess.run(
        [sys.executable, "-m", "podserve.cli.main", "fetch", url, "--cache-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 6, result.stderr
    assert result.stdout == ""
    error = orjson.loads(result.stderr.splitlines()[-1])
    assert error["event"] == "error"
    assert "'../x': a path that leaves the model directory is refused" in error["msg"]
    events = [orjson.loads(line)["event"] for line in result.stderr.splitlines()]
    assert "unpacking" in events
    assert "published" not in events
