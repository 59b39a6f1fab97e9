"""Paths the Kubernetes tooling tests read."""

from __future__ import annotations

from pathlib import Path

from podserve.config.model_service import ModelService, load_model_service

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
GOLDEN = Path(__file__).resolve().parent / "golden"
EXAMPLES = sorted((REPO_ROOT / "examples" / "kube").glob("*.yaml"))


def load_example(path: Path) -> ModelService:
    return load_model_service(path.read_text(), str(path))
