"""`podserve fetch`: stdout, JSON progress and one exit code per kind of failure."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

import orjson
import pytest

from podserve.cli import fetch as fetch_cli
from tests.storage.support import ServerState, expected_digest, write_model

DATA = b"model bytes" * 1000


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    fetch_cli.register(parser.add_subparsers())
    args = parser.parse_args(["fetch", *argv])
    code: int = args.run(args)
    return code


def _error_line(err: str) -> dict[str, object]:
    record: dict[str, object] = orjson.loads(err.strip().splitlines()[-1])
    assert record["event"] == "error"
    return record


def test_success_prints_only_the_path_on_stdout(
    http_server: tuple[str, ServerState], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, state = http_server
    state.put("/m.bin", DATA)
    digest = expected_digest({"m.bin": DATA})
    assert (
        _run(
            f"{base}/m.bin", "--digest", digest, "--cache-dir", str(tmp_path), "--progress", "json"
        )
        == fetch_cli.EXIT_OK
    )
    out, err = capsys.readouterr()
    path = Path(out.strip())
    assert (path / "m.bin").read_bytes() == DATA
    events = [orjson.loads(line)["event"] for line in err.splitlines()]
    assert events[0] == "downloading"
    assert events[-1] == "published"
    assert "file_started" in events
    assert "verifying" in events


def test_exit_codes(
    http_server: tuple[str, ServerState], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, state = http_server
    state.put("/m.bin", DATA)
    cache = ["--cache-dir", str(tmp_path / "c"), "--progress", "json"]

    assert _run("ftp://host/m", *cache) == fetch_cli.EXIT_USAGE
    assert _run(f"{base}/m.bin", "--digest", "sha256:xyz", *cache) == fetch_cli.EXIT_USAGE
    assert _run(f"{base}/missing.bin", *cache) == fetch_cli.EXIT_NOT_FOUND
    assert _error_line(capsys.readouterr().err)["exit_code"] == 3

    wrong = "sha256:" + "0" * 64
    assert _run(f"{base}/m.bin", "--digest", wrong, *cache) == fetch_cli.EXIT_DIGEST_MISMATCH
    record = _error_line(capsys.readouterr().err)
    assert record["expected"] == wrong
    assert record["actual"] == expected_digest({"m.bin": DATA})

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert _run(f"http://127.0.0.1:{port}/m.bin", *cache) == fetch_cli.EXIT_NETWORK
    # A SAS in an Azure Blob URI would be logged and rendered into the pod: refused.
    assert _run("https://acct1.blob.core.windows.net/c/m?sv=x&sig=y", *cache) == (
        fetch_cli.EXIT_USAGE
    )
    message = str(_error_line(capsys.readouterr().err)["error"])
    assert "AZURE_STORAGE_SAS_TOKEN" in message
    assert "sig=y" not in message


def test_plain_error_message_without_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(str(tmp_path / "nope"), "--progress", "none") == fetch_cli.EXIT_NOT_FOUND
    assert capsys.readouterr().err.startswith("podserve fetch: no such file or directory")


def test_argparse_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _run("uri", "--progress", "loud")
    assert info.value.code == fetch_cli.EXIT_USAGE


def test_cache_dir_defaults_to_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {"x": b"1"}
    root = write_model(tmp_path / "m", files)
    monkeypatch.setenv("PODSERVE_CACHE_DIR", str(tmp_path / "envcache"))
    assert (
        _run(str(root), "--copy-local", "--digest", expected_digest(files), "--progress", "none")
        == 0
    )
    assert Path(capsys.readouterr().out.strip()).parent == tmp_path / "envcache" / "entries"


def test_bad_cache_bound_in_the_environment_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PODSERVE_CACHE_MAX_BYTES", "lots")
    assert _run(str(tmp_path), "--progress", "none") == fetch_cli.EXIT_USAGE
