"""The configuration reference is generated from the field descriptions; it must match."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_configuration_docs_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts/gen_config_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
