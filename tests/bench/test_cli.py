"""`podserve bench` end to end against a real server, with small request counts."""

from __future__ import annotations

import socket
from pathlib import Path

import orjson
import pytest
import yaml

from podserve.cli.main import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _common(port: int, out: Path) -> list[str]:
    return [
        "bench",
        "--url",
        f"http://127.0.0.1:{port}",
        "--requests",
        "15",
        "--warmup",
        "0s",
        "--no-progress",
        "--out",
        str(out),
    ]


def test_closed_loop_sweep_against_an_oip_model_dir(
    server_port: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_dir = tmp_path / "echo"
    model_dir.mkdir()
    (model_dir / "model.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "echo",
                "runtime": "fake",
                "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
            }
        )
    )
    out = tmp_path / "out"
    code = main(
        [
            *_common(server_port, out),
            "--model-dir",
            str(model_dir),
            "--concurrency",
            "1,3",
            "--slo",
            "e2e=10s",
        ]
    )
    assert code == 0
    result = orjson.loads((out / "result.json").read_bytes())
    assert [s["level"] for s in result["steps"]] == [1.0, 3.0]
    assert all(s["requests"] == 15 and s["ok"] == 15 for s in result["steps"])
    assert result["ceiling"] == 3.0
    assert result["plan"]["workload"].startswith("OIP v2 infer on 'echo' (x 1x4 FP32)")
    assert (out / "latency_throughput.png").read_bytes().startswith(PNG_MAGIC)
    stdout = capsys.readouterr().out
    assert "autoscaling:" in stdout
    assert "metric: inflight" in stdout


def test_open_loop_openai_stream(server_port: int, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = main(
        [
            *_common(server_port, out),
            "--api",
            "openai-chat",
            "--model",
            "m",
            "--rate",
            "200",
            "--arrival",
            "bursty",
            "--prompt-tokens",
            "4..16",
            "--slo",
            "ttft=5s,tpot=1s",
        ]
    )
    assert code == 0
    step = orjson.loads((out / "result.json").read_bytes())["steps"][0]
    assert step["mode"] == "rate"
    assert step["ok"] == 15
    assert step["ttft_ms"]["count"] == 15
    assert step["output_tokens_per_s"] > 0
    assert (out / "ttft_tpot.png").read_bytes().startswith(PNG_MAGIC)


def test_payload_file_and_error_statuses(server_port: int, tmp_path: Path) -> None:
    payloads = tmp_path / "bodies.jsonl"
    payloads.write_text('{"a": 1}\n{"a": 2}\n')
    out = tmp_path / "out"
    code = main(
        [
            *_common(server_port, out),
            "--payload-file",
            str(payloads),
            "--path",
            "/status/429",
            "--no-plots",
        ]
    )
    assert code == 1  # no request succeeded
    step = orjson.loads((out / "result.json").read_bytes())["steps"][0]
    assert step["status_counts"] == {"429": 15}
    assert not list(out.glob("*.png"))


def test_unreachable_target_exits_1(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        code = main(
            [*_common(port, tmp_path), "--model", "m", "--input", "x:1x4:FP32", "--no-plots"]
        )
    assert code == 1


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "m"],  # OIP without inputs
        ["--api", "openai-chat"],  # no model
        ["--model", "m", "--input", "x:1x4:FP99"],
        ["--model", "m", "--input", "x:1x4:FP32", "--concurrency", "0"],
        ["--model", "m", "--input", "x:1x4:FP32", "--slo", "p99=1s"],
        ["--url", "https://example.invalid", "--model", "m", "--input", "x:1x4:FP32"],
    ],
)
def test_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", *args]) == 2
    assert "podserve bench:" in capsys.readouterr().err


def test_self_test_measures_the_client(capsys: pytest.CaptureFixture[str]) -> None:
    # The real self-test path (trivial server in a child process), kept short.
    from podserve.bench.client import run
    from podserve.bench.loop import Budget
    from podserve.bench.selftest import run_self_test

    result, limits = run(
        run_self_test("raw", levels=(1, 2), budget=Budget(duration_s=None, requests=50, warmup_s=0))
    )
    assert [s.ok for s in result.summaries] == [50, 50]
    assert limits.ceiling_rps > 0
    assert limits.floor_p50_ms is not None
    assert limits.floor_p50_ms > 0
    assert result.advice is None
