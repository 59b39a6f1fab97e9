"""Regenerate the runtime parameter tables in docs/runtimes.md from the typed parameter
models (podserve/runtimes/parameters.py), so the docs cannot drift from what a runtime
accepts.

    python scripts/gen_runtime_docs.py          # rewrite docs/runtimes.md
    python scripts/gen_runtime_docs.py --check  # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from podserve.runtimes.parameters import sync_parameter_tables

DOC = Path(__file__).resolve().parents[1] / "docs" / "runtimes.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    current = DOC.read_text()
    wanted = sync_parameter_tables(current)
    if args.check:
        if current != wanted:
            print(f"{DOC} is stale: run python scripts/gen_runtime_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
