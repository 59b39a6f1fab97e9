from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path

import pytest

from podserve.cli import digest as digest_cli
from podserve.storage import Digest, compute_digest, compute_manifest
from podserve.storage.digest import verify
from podserve.storage.errors import DigestMismatch, ModelNotFoundAtSource
from tests.storage.support import expected_digest, write_model

FILES = {"config.json": b'{"a": 1}', "weights/w.bin": bytes(range(256)) * 64, "z": b""}


def test_directory_digest_matches_the_documented_definition(tmp_path: Path) -> None:
    root = write_model(tmp_path / "m", FILES)
    assert str(compute_digest(root)) == expected_digest(FILES)
    manifest = compute_manifest(root)
    assert [e.path for e in manifest.entries] == ["config.json", "weights/w.bin", "z"]
    assert manifest.total_size_bytes == sum(len(d) for d in FILES.values())


def test_a_single_file_is_a_directory_of_one_file(tmp_path: Path) -> None:
    data = b"onnx bytes"
    single = tmp_path / "model.onnx"
    single.write_bytes(data)
    as_dir = write_model(tmp_path / "d", {"model.onnx": data})
    assert compute_digest(single) == compute_digest(as_dir)
    assert str(compute_digest(single)) == expected_digest({"model.onnx": data})


def test_content_name_and_layout_all_change_the_digest(tmp_path: Path) -> None:
    base = compute_digest(write_model(tmp_path / "a", FILES))
    one_byte = dict(FILES, z=b"x")
    renamed = {("weights/w2.bin" if k == "weights/w.bin" else k): v for k, v in FILES.items()}
    moved = {("w.bin" if k == "weights/w.bin" else k): v for k, v in FILES.items()}
    others = [
        compute_digest(write_model(tmp_path / n, f))
        for n, f in (("b", one_byte), ("c", renamed), ("d", moved))
    ]
    assert len({base, *others}) == 4


def test_empty_directories_do_not_count_and_file_links_are_followed(tmp_path: Path) -> None:
    plain = write_model(tmp_path / "plain", FILES)
    linked = write_model(tmp_path / "linked", {k: v for k, v in FILES.items() if k != "z"})
    (tmp_path / "blob").write_bytes(b"")
    os.symlink(tmp_path / "blob", linked / "z")
    (linked / "empty" / "dir").mkdir(parents=True)
    os.symlink(linked, linked / "loop")  # a directory link is not entered: no endless walk
    assert compute_digest(linked) == compute_digest(plain)


def test_verify_reports_expected_and_actual(tmp_path: Path) -> None:
    root = write_model(tmp_path / "m", FILES)
    wrong = Digest(hashlib.sha256(b"not it").hexdigest())
    with pytest.raises(DigestMismatch) as info:
        verify(root, wrong)
    assert info.value.expected == str(wrong)
    assert info.value.actual == expected_digest(FILES)
    assert str(wrong) in info.value.message
    assert expected_digest(FILES) in info.value.message


def test_missing_path_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundAtSource):
        compute_digest(tmp_path / "nope")


def _run_digest(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    digest_cli.register(parser.add_subparsers())
    args = parser.parse_args(["digest", *argv])
    code: int = args.run(args)
    return code


def test_cli_prints_the_digest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_model(tmp_path / "m", FILES)
    assert _run_digest(str(root)) == 0
    assert capsys.readouterr().out == expected_digest(FILES) + "\n"
    assert _run_digest(str(root), "--manifest") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == expected_digest(FILES)
    assert out[0] == f"{hashlib.sha256(FILES['config.json']).hexdigest()} 8 config.json"
    assert _run_digest(str(tmp_path / "nope")) == digest_cli.EXIT_NOT_FOUND


def test_podserve_main_discovers_digest_and_fetch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from podserve.cli.main import main

    root = write_model(tmp_path / "m", FILES)
    assert main(["digest", str(root)]) == 0
    assert capsys.readouterr().out.strip() == expected_digest(FILES)
    assert main(["fetch", str(root), "--progress", "none"]) == 0
    assert capsys.readouterr().out.strip() == str(root)
