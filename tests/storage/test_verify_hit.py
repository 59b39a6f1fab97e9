"""`podserve fetch --verify-hit`: on a node cache other pods can write to (a hostPath), a
pinned hit is re-hashed against the pinned digest, and a tampered entry is fetched again."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from podserve.cli import fetch as fetch_cli
from tests.storage.support import ServerState, expected_digest

DATA = b"model bytes" * 1000


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    fetch_cli.register(parser.add_subparsers())
    args = parser.parse_args(["fetch", *argv])
    code: int = args.run(args)
    return code


def test_tampered_pinned_hit_is_fetched_again_only_with_verify_hit(
    http_server: tuple[str, ServerState], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, state = http_server
    state.put("/m.bin", DATA)
    digest = expected_digest({"m.bin": DATA})
    argv = [f"{base}/m.bin", "--digest", digest, "--cache-dir", str(tmp_path), "--progress", "none"]
    assert _run(*argv) == fetch_cli.EXIT_OK
    path = Path(capsys.readouterr().out.strip())
    # Another tenant rewrites the file in place: same name, same size, other bytes.
    forged = b"X" * len(DATA)
    (path / "m.bin").chmod(0o644)
    (path / "m.bin").write_bytes(forged)

    # Without the flag a pinned hit is checked by names and sizes only: the forgery passes.
    assert _run(*argv) == fetch_cli.EXIT_OK
    assert (Path(capsys.readouterr().out.strip()) / "m.bin").read_bytes() == forged

    # With it, the hit is re-hashed against the pin, dropped, and the model fetched again.
    assert _run(*argv, "--verify-hit") == fetch_cli.EXIT_OK
    again = Path(capsys.readouterr().out.strip())
    assert (again / "m.bin").read_bytes() == DATA
    assert _run(*argv, "--verify-hit") == fetch_cli.EXIT_OK  # a sound hit passes
    assert (Path(capsys.readouterr().out.strip()) / "m.bin").read_bytes() == DATA
