"""`podserve doctor` on realistic dumps of failing serving pods."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from podserve.core.errors import InvalidInput
from podserve.kube.doctor import diagnose
from podserve.kube.doctor.inputs import dumps, live_dump
from tests.kube.conftest import CliRunner
from tests.kube.paths import FIXTURES

CASES = FIXTURES / "doctor"


def load(case: str) -> list[str | None]:
    folder = CASES / case
    return [
        (folder / name).read_text() if (folder / name).exists() else None
        for name in ("pod.yaml", "events.yaml", "logs.txt")
    ]


def diagnoses(case: str) -> list[str]:
    pod, events, logs = load(case)
    assert pod is not None
    (dump,) = dumps(pod, events, logs)
    return [d.id for d in diagnose(dump)]


@pytest.mark.parametrize(
    "case",
    [
        "insufficient-gpu",
        "untolerated-taint",
        "liveness-during-load",
        "oom-killed",
        "cuda-oom",
        "image-pull",
        "readiness-never",
    ],
)
def test_each_case_gets_exactly_its_diagnosis(case: str) -> None:
    assert diagnoses(case) == [case]


def test_healthy_pod_has_no_diagnosis() -> None:
    assert diagnoses("healthy") == []


def test_insufficient_gpu_names_what_to_check() -> None:
    pod, events, logs = load("insufficient-gpu")
    assert pod is not None
    (found,) = diagnose(dumps(pod, events, logs)[0])
    text = " ".join(found.fix)
    assert "device plugin" in text
    assert "nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB" in text
    assert "resourcequota" in text
    assert any("Insufficient nvidia.com/gpu" in line for line in found.evidence)


def test_liveness_case_sizes_the_startup_probe_from_the_observed_load(tmp_path: Path) -> None:
    pod, events, logs = load("liveness-during-load")
    assert pod is not None
    assert logs is not None
    (found,) = diagnose(dumps(pod, events, logs + "model mixtral loaded in 200.0s\n")[0])
    assert "failureThreshold: 30" in found.fix[0]  # ceil(200 x 1.5 / 10)
    (unsized,) = diagnose(dumps(pod, events, logs)[0])
    assert "observed load time" in unsized.fix[0]


def test_oom_during_load_explains_host_memory() -> None:
    pod, events, logs = load("oom-killed")
    assert pod is not None
    (found,) = diagnose(dumps(pod, events, logs)[0])
    assert found.title == "OOMKilled during model load"
    assert "container server memory limit: 8Gi" in found.evidence


def test_cli_text_and_json(cli: CliRunner) -> None:
    folder = CASES / "cuda-oom"
    code, out, _ = cli(
        "doctor", "--pod", str(folder / "pod.yaml"), "--logs", str(folder / "logs.txt")
    )
    assert code == 1
    assert "[cuda-oom] CUDA out of memory under load" in out
    assert "log: torch.OutOfMemoryError: CUDA out of memory." in out
    assert "maxConcurrentSequences" in out
    code, out, _ = cli(
        "doctor",
        "--pod",
        str(CASES / "image-pull" / "pod.yaml"),
        "--events",
        str(CASES / "image-pull" / "events.yaml"),
        "--format",
        "json",
    )
    payload = json.loads(out)
    assert code == 1
    assert payload[0]["diagnoses"][0]["id"] == "image-pull"
    assert "does not exist" in payload[0]["diagnoses"][0]["explanation"]
    code, out, _ = cli("doctor", "--pod", str(CASES / "healthy" / "pod.yaml"))
    assert code == 0
    assert "no known problem" in out


def test_live_mode_through_kubectl_seam() -> None:
    pod, events, _logs = load("readiness-never")
    calls: list[list[str]] = []

    def fake_kubectl(args: Sequence[str]) -> str:
        calls.append(list(args))
        if args[:2] == ["get", "pod"]:
            return pod or ""
        if args[:2] == ["get", "events"]:
            return events or ""
        if "--previous" in args:
            raise InvalidInput("previous terminated container not found")
        return "server listening on 127.0.0.1:8000\n"

    (dump,) = live_dump("fraud-score-5f6d7c8b9-k2l4m", "risk", run=fake_kubectl)
    (found,) = diagnose(dump)
    assert found.id == "readiness-never"
    assert "127.0.0.1" in found.explanation
    assert ["get", "pod", "fraud-score-5f6d7c8b9-k2l4m", "-n", "risk", "-o", "yaml"] in calls


def test_bad_inputs(cli: CliRunner, tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    code, _, err = cli("doctor", "--pod", str(empty))
    assert code == 2
    assert "no Pod" in err
    assert cli("doctor")[0] == 2
