"""The repository stands alone: a user's clone has nothing beside it, so nothing the product,
its tests or its CI run may reach for the workspace folder that sits next to our checkout."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# Written in pieces so that this file does not match itself.
FORBIDDEN = re.compile(re.escape("../" + "shared") + "|" + re.escape("PODSERVE_" + "SHARED_DIR"))
CHECKED = ("src", "tests", "scripts", "benchmarks", "examples", "Makefile", ".ci", "pyproject.toml")


def tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *CHECKED],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [REPO_ROOT / name for name in listed if (REPO_ROOT / name).is_file()]


def test_nothing_reads_outside_the_repository() -> None:
    files = tracked_files()
    assert any(path.name == "Makefile" for path in files)
    offenders = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if FORBIDDEN.search(text):
            offenders.append(str(path.relative_to(REPO_ROOT)))
    assert offenders == [], f"these files reach outside the repository: {offenders}"


def test_shipped_crds_have_their_sources() -> None:
    crds = REPO_ROOT / "src" / "podserve" / "kube" / "crds"
    sources = (crds / "SOURCES.md").read_text()
    yamls = sorted(path.name for path in crds.glob("*.yaml"))
    assert yamls
    for name in yamls:
        assert name in sources, f"{name} has no source/licence line in SOURCES.md"
    assert "Apache" in sources
