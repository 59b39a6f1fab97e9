"""Regenerate the layer diagram and the import contract in docs/architecture.md from the
import-linter contracts in pyproject.toml (what `lint-imports` enforces), so the picture
a newcomer reads is the rule CI checks.

    python scripts/gen_architecture_docs.py          # rewrite docs/architecture.md
    python scripts/gen_architecture_docs.py --check  # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
BLOCK = re.compile(
    r"(<!-- import-contract: generated from pyproject.toml by "
    r"scripts/gen_architecture_docs.py -->\n).*?(<!-- /import-contract -->)",
    re.DOTALL,
)


def _short(module: str) -> str:
    return module.removeprefix("podserve.")


def render(pyproject: dict[str, Any]) -> str:
    contracts = pyproject["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")
    lines = [
        f'Layers, top to bottom (contract "{layers["name"]}"): a package imports only',
        "from the rows below its own; packages on one row (`|`) are independent and import",
        "neither each other.",
        "",
        "```",
    ]
    rows = [[_short(m.strip()) for m in layer.split("|")] for layer in layers["layers"]]
    for index, row in enumerate(rows):
        lines.append("  " + " | ".join(row))
        if index < len(rows) - 1:
            lines.append("    ▼")
    lines.append("```")
    lines.append("")
    for contract in contracts:
        if contract["type"] != "forbidden":
            continue
        sources = ", ".join(f"`{_short(m)}`" for m in contract["source_modules"])
        forbidden = ", ".join(f"`{m}`" for m in contract["forbidden_modules"])
        lines.append(f"- **{contract['name']}**: {sources} never import {forbidden}.")
    return "\n".join(lines) + "\n"


def sync(text: str, pyproject: dict[str, Any]) -> str:
    return BLOCK.sub(lambda m: m[1] + render(pyproject) + m[2], text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    current = DOC.read_text()
    if not BLOCK.search(current):
        print(f"{DOC} has no import-contract block", file=sys.stderr)
        return 1
    wanted = sync(current, pyproject)
    if args.check:
        if current != wanted:
            print(f"{DOC} is stale: run python scripts/gen_architecture_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
