"""Entry point: discovers every subcommand module in this package and dispatches."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

import podserve
import podserve.cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podserve", description="Model serving that behaves correctly on Kubernetes."
    )
    parser.add_argument("--version", action="version", version=f"podserve {podserve.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(podserve.cli.__path__), key=lambda m: m.name):
        if info.name in {"main"} or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"podserve.cli.{info.name}")
        register = getattr(module, "register", None)
        if callable(register):
            register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
