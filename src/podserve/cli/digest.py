"""`podserve digest PATH`: print the digest that pins a model directory or file.

The digest is sha256 over a sorted manifest of every file's sha256, size and relative
path (docs/storage.md has the exact definition); a single file is a directory of one.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

EXIT_NOT_FOUND = 3


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "digest",
        help="print the sha256 digest of a model directory or file",
        description=__doc__,
    )
    parser.add_argument("path", type=Path, metavar="PATH", help="model directory or file")
    parser.add_argument(
        "--artifacts",
        action="store_true",
        help="leave out a top-level model.yaml: the digest to write into that model.yaml's "
        "`digest:` field",
    )
    parser.add_argument(
        "--manifest",
        action="store_true",
        help="print the manifest that is hashed (one '<sha256> <size> <path>' "
        "line a file) before the digest: compare two to find a difference",
    )
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    import sys

    from podserve.storage import (
        InvalidModelURI,
        ModelNotFoundAtSource,
        artifacts_manifest,
        compute_manifest,
    )

    try:
        manifest = artifacts_manifest(args.path) if args.artifacts else compute_manifest(args.path)
    except ModelNotFoundAtSource as exc:
        sys.stderr.write(f"podserve digest: {exc.message}\n")
        return EXIT_NOT_FOUND
    except (InvalidModelURI, OSError) as exc:
        sys.stderr.write(f"podserve digest: {exc}\n")
        return 1
    if args.manifest:
        sys.stdout.write(manifest.text())
    sys.stdout.write(f"{manifest.digest}\n")
    return 0
