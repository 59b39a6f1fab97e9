"""`podserve eval` end to end: a real podserve server with the bundled iris, sentiment and
mlp models, a golden set through the real CLI, a saved baseline; then a second server whose
sentiment model was deliberately changed (negated weights), which the run must catch."""

from __future__ import annotations

import importlib.util
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from podserve.cli.main import main
from tests.support.server import ServerProcess, wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("iris", "sentiment", "mlp")
TEXTS = {
    "sentiment-praise": "I loved this movie, it was wonderful",
    "sentiment-complaint": "terrible, boring and a waste of time",
}


def repository(root: Path) -> Path:
    """Only the three models under test: the example repository holds heavier ones."""
    for name in MODELS:
        shutil.copytree(ROOT / "examples" / "models" / name, root / name)
    return root


def serve(models: Path) -> ServerProcess:
    process = ServerProcess("--model-repository", str(models)).start()
    wait_until(lambda: process.get("/ready").status_code == 200, timeout_s=60, what="ready")
    return process


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = serve(repository(tmp_path_factory.mktemp("good")))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def changed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    models = repository(tmp_path_factory.mktemp("changed"))
    weights = models / "sentiment" / "weights.npy"
    np.save(weights, -np.load(weights))  # every score s becomes 1 - s: labels flip
    process = serve(models)
    yield process
    process.stop()


def sentiment_scores() -> dict[str, float]:
    """What the sentiment model computes, from its own code and weights (not the server)."""
    spec = importlib.util.spec_from_file_location(
        "sentiment_model", ROOT / "examples" / "models" / "sentiment" / "model.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    weights = np.load(ROOT / "examples" / "models" / "sentiment" / "weights.npy")
    features = module.featurize(TEXTS.values(), weights.shape[0] - 1)
    scores = 1 / (1 + np.exp(-(features @ weights[:-1] + weights[-1])))
    return dict(zip(TEXTS, (float(s) for s in scores), strict=True))


def mlp_expectation() -> tuple[list[float], list[float], int]:
    """A real 8x8 digit (sklearn's bundled set) and what the ONNX graph says about it."""
    import onnxruntime
    from sklearn.datasets import load_digits

    pixels = load_digits().data[0].astype(np.float32)
    session = onnxruntime.InferenceSession(
        str(ROOT / "examples" / "models" / "mlp" / "model.onnx"),
        providers=["CPUExecutionProvider"],
    )
    label, probabilities = session.run(None, {"input": pixels[None, :]})
    return pixels.tolist(), probabilities[0].tolist(), int(label[0])


def golden_set() -> list[dict[str, Any]]:
    iris = [
        ("iris-setosa", [5.1, 3.5, 1.4, 0.2], 0),
        ("iris-versicolor", [6.2, 2.9, 4.3, 1.3], 1),
        ("iris-virginica", [7.7, 3.0, 6.1, 2.3], 2),
    ]
    cases: list[dict[str, Any]] = [
        {
            "id": case_id,
            "tags": ["iris"],
            "model": "iris",
            "inputs": {"features": features},  # row form: FP32 from the model's metadata
            "expect": [{"kind": "exact", "output": "label", "value": label}],
        }
        for case_id, features, label in iris
    ]
    for case_id, score in sentiment_scores().items():
        cases.append(
            {
                "id": case_id,
                "tags": ["sentiment"],
                "model": "sentiment",
                "inputs": {"text": TEXTS[case_id]},
                "expect": [
                    {
                        "kind": "exact",
                        "output": "label",
                        "value": "positive" if score >= 0.5 else "negative",
                    },
                    {"kind": "numeric", "output": "score", "value": [score], "abs_tol": 1e-4},
                    {"kind": "regex", "output": "label", "pattern": "^(positive|negative)$"},
                ],
            }
        )
    pixels, probabilities, label = mlp_expectation()
    cases.append(
        {
            "id": "mlp-digit-0",
            "tags": ["mlp"],
            "model": "mlp",
            "inputs": {"input": {"datatype": "FP32", "shape": [1, 64], "data": pixels}},
            "expect": [
                {"kind": "exact", "output": "label", "value": label},
                {
                    "kind": "numeric",
                    "output": "probabilities",
                    "value": probabilities,
                    "abs_tol": 1e-5,
                    "rel_tol": 1e-4,
                },
            ],
        }
    )
    return cases


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("suite") / "golden.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(case) for case in golden_set()) + b"\n")
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["eval", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_golden_set_passes_and_becomes_the_baseline(
    good: ServerProcess,
    suite: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    gateway: tuple[str, list[tuple[str, str, str]]],
) -> None:
    baseline, textfile = tmp_path / "baseline.json", tmp_path / "eval.prom"
    code, out, err = run_cli(
        capsys,
        str(suite),
        "--url",
        good.url,
        "--save-baseline",
        str(baseline),
        "--textfile",
        str(textfile),
        "--format",
        "json",
        "--min-pass-ratio",
        "1",
        "--suite",
        "golden",
        "--pushgateway",
        gateway[0],
    )
    assert code == 0, out + err
    assert [(m, p) for m, p, _ in gateway[1]] == [
        ("PUT", "/metrics/job/podserve_eval/suite/golden")
    ]
    report = orjson.loads(out)
    assert report["pass_ratio"] == 1.0, report["cases"]
    assert report["ratios"]["sentiment"] == {"passed": 2, "total": 2, "ratio": 1.0}
    assert orjson.loads(baseline.read_bytes())["cases"] == report["cases"]
    ratios = {
        s.labels["tag"]: s.value
        for family in text_string_to_metric_families(textfile.read_text())
        for s in family.samples
        if s.name == "podserve_eval_pass_ratio"
    }
    assert ratios == {"all": 1.0, "iris": 1.0, "mlp": 1.0, "sentiment": 1.0}

    code, out, _ = run_cli(
        capsys, str(suite), "--url", good.url, "--baseline", str(baseline), "--format", "markdown"
    )
    assert code == 0
    assert "6/6 cases passed (100.0%)" in out
    assert "| sentiment | 2 | 2 | 100.0% | 100.0% |" in out
    assert "- no regression against the baseline" in out

    # A Pushgateway that cannot be reached fails an otherwise passing run with exit 3.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    code, _, err = run_cli(capsys, str(suite), "--url", good.url, "--pushgateway", dead)
    assert code == 3
    assert "cannot export metrics" in err


def test_changed_model_is_caught_as_a_regression(
    good: ServerProcess,
    changed: ServerProcess,
    suite: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    baseline = tmp_path / "baseline.json"
    assert run_cli(capsys, str(suite), "--url", good.url, "--save-baseline", str(baseline))[0] == 0

    code, out, err = run_cli(
        capsys, str(suite), "--url", changed.url, "--baseline", str(baseline), "--strict-cases"
    )
    assert code == 1, out + err
    assert "4/6 cases passed (66.7%)" in out
    assert "REGRESSION: pass ratio of tag sentiment fell from 100.0% to 0.0%" in out
    assert "newly failing: sentiment-praise, sentiment-complaint" in out
    assert "FAIL sentiment-praise [sentiment]" in out
    assert 'check 1 (exact label): got "negative", expected "positive"' in out
    assert "check 2 (numeric score): 1 of 1 values out of tolerance" in out
    assert "check 3" not in out  # the label is still one of the two words
    assert "FAIL iris" not in out
    assert "FAIL mlp" not in out
    assert "regression against the baseline" in err

    # Without a baseline, --min-pass-ratio alone gates the run.
    code, _, err = run_cli(capsys, str(suite), "--url", changed.url, "--min-pass-ratio", "0.9")
    assert code == 1
    assert "pass ratio 66.7% is below --min-pass-ratio 90.0%" in err
    # Without either gate, any failed case fails the run (a CronJob must not report
    # success while cases fail); --min-pass-ratio 0 asks for a report only.
    code, out, err = run_cli(capsys, str(suite), "--url", changed.url)
    assert code == 1, out + err
    assert "2 of 6 case(s) failed (sentiment-praise, sentiment-complaint)" in err
    assert run_cli(capsys, str(suite), "--url", changed.url, "--min-pass-ratio", "0")[0] == 0
    # A baseline alone decides: a drop within --max-drop passes though cases fail.
    code, _, err = run_cli(
        capsys, str(suite), "--url", changed.url, "--baseline", str(baseline), "--max-drop", "1"
    )
    assert code == 0, err


def test_the_installed_command_exits_non_zero_when_every_case_fails(
    good: ServerProcess, tmp_path: Path
) -> None:
    """The issue's case, through the `podserve` process a CronJob runs: 0/3 passed."""
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_bytes(
        b"\n".join(
            orjson.dumps(
                {
                    "id": f"iris-{i}",
                    "model": "iris",
                    "inputs": {"features": [5.1, 3.5, 1.4, 0.2]},
                    "expect": [{"kind": "exact", "output": "label", "value": 2}],
                }
            )
            for i in range(3)
        )
    )
    command = [sys.executable, "-m", "podserve.cli.main", "eval", str(wrong), "--url", good.url]
    failed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "0/3 cases passed" in failed.stdout
    assert "3 of 3 case(s) failed" in failed.stderr
    report_only = subprocess.run(
        [*command, "--min-pass-ratio", "0"], capture_output=True, text=True, timeout=120
    )
    assert report_only.returncode == 0, report_only.stderr


def test_unreachable_endpoint_and_bad_suites(
    suite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    textfile = tmp_path / "eval.prom"
    with socket.socket() as probe:  # a free port, closed again: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, out, err = run_cli(
        capsys, str(suite), "--url", f"http://127.0.0.1:{port}", "--textfile", str(textfile)
    )
    assert code == 3
    assert out == ""
    assert "is unreachable" in err
    assert not textfile.exists()  # no metrics: the stale-run alert reports it instead

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "model": "iris", "expect": []}\n')
    code, _, err = run_cli(capsys, str(bad))
    assert code == 2
    assert "bad.jsonl:1:" in err
    assert run_cli(capsys, str(tmp_path / "missing.jsonl"))[0] == 2
    assert run_cli(capsys, str(suite), "--baseline", str(bad))[0] == 2
    assert run_cli(capsys, str(suite), "--header", "no-colon")[0] == 2
