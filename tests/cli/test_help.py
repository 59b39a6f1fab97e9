"""Every subcommand's --help reads cleanly: no pydantic sentinel (`PydanticUndefined`, which
`podserve serve --help` printed for fields with a default factory), no argparse sentinel."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator

import pytest

from podserve.cli.main import build_parser

SENTINELS = ("PydanticUndefined", "==SUPPRESS==", "<factory>", "<function")


def _parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:  # argparse has no public way to list subparsers
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, (*path, name))


ALL = list(_parsers(build_parser()))


def test_every_subcommand_is_covered() -> None:
    names = {path[0] for path, _ in ALL if path}
    assert {"serve", "fetch", "eval", "batch", "bench", "render", "lint"} <= names


@pytest.mark.parametrize(("path", "parser"), ALL, ids=[" ".join(p) or "podserve" for p, _ in ALL])
def test_help_shows_no_sentinel(path: tuple[str, ...], parser: argparse.ArgumentParser) -> None:
    text = parser.format_help()
    for sentinel in SENTINELS:
        assert sentinel not in text, f"podserve {' '.join(path)} --help shows {sentinel}"


def test_serve_help_through_the_command_shows_real_defaults() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "podserve.cli.main", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "400", "PATH": ""},
    )
    lines = result.stdout.splitlines()
    assert not [line for line in lines if "PydanticUndefined" in line]
    assert any("[env PODSERVE_MODELS; default []]" in line for line in lines)
    assert any("[env PODSERVE_PAYLOAD_LOG_REDACT; default []]" in line for line in lines)
    assert any("[env PODSERVE_MAX_QUEUE; default " in line for line in lines)
