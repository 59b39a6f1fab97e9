from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson

import podserve.bench
from podserve.bench.ceiling import ceiling_level, knee_level, recommend_autoscaling
from podserve.bench.report import to_markdown, write_outputs
from podserve.bench.stats import Slo, summarize
from podserve.bench.sweep import BenchResult, StepResult

from .synthetic import capacity_step, columns

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SLO = Slo(e2e_s=0.025)


def _result(streamed: bool = False) -> BenchResult:
    steps = []
    for level in (1.0, 8.0, 32.0, 64.0):
        if streamed:
            lat = [0.2 + 0.01 * level] * 50
            cols = columns(lat, ttft_s=[0.05] * 50, tokens=[16] * 50)
            summary = summarize(cols, "rate", level, Slo(ttft_s=0.1, tpot_s=0.05))
            steps.append(StepResult(summary, cols.latency_s, cols.ttft_s, np.full(50, 0.01)))
        else:
            summary = capacity_step(level, SLO)
            steps.append(
                StepResult(summary, np.full(10, 0.01), np.full(10, np.nan), np.full(10, np.nan))
            )
    summaries = [s.summary for s in steps]
    return BenchResult(
        started_at="2026-01-01T00:00:00+00:00",
        plan={
            "target": "http://127.0.0.1:1",
            "workload": "synthetic",
            "mode": "concurrency",
            "levels": [1, 8, 32, 64],
            "arrival": None,
            "duration_s": 1.0,
            "requests_per_step": None,
            "warmup_s": 0.0,
            "timeout_s": 1.0,
            "slo": SLO.describe(),
            "slo_attainment_target": 0.99,
        },
        client={"uvloop": True, "python": "3.11", "machine": "x86_64"},
        steps=steps,
        ceiling=ceiling_level(summaries),
        knee=knee_level(summaries),
        advice=recommend_autoscaling(summaries),
    )


def test_outputs_are_written_with_valid_pngs(tmp_path: Path) -> None:
    result = _result()
    written = write_outputs(result, tmp_path)
    png = written["latency_throughput"]
    assert png.read_bytes().startswith(PNG_MAGIC)
    assert "ttft_tpot" not in written  # nothing streamed
    data = orjson.loads(written["json"].read_bytes())
    assert [s["level"] for s in data["steps"]] == [1.0, 8.0, 32.0, 64.0]
    assert data["ceiling"] == 32.0
    assert data["autoscaling"]["metric"] == "inflight"
    assert data["steps"][0]["latency_ms"]["p99"] > 0
    markdown = written["markdown"].read_text()
    assert "| concurrency | req/s |" in markdown
    assert "**Ceiling:** the SLO holds up to concurrency 32." in markdown
    assert "![latency_throughput](latency_throughput.png)" in markdown


def test_streamed_results_get_token_columns_and_distribution_plot(tmp_path: Path) -> None:
    result = _result(streamed=True)
    written = write_outputs(result, tmp_path)
    assert written["ttft_tpot"].read_bytes().startswith(PNG_MAGIC)
    markdown = to_markdown(result)
    assert "TTFT p50" in markdown
    assert "goodput" in markdown


def test_outputs_without_plots(tmp_path: Path) -> None:
    written = write_outputs(_result(), tmp_path, plots=False)
    assert set(written) == {"json", "markdown"}
    assert not list(tmp_path.glob("*.png"))


def test_public_surface_is_sorted_and_importable() -> None:
    names = podserve.bench.__all__
    assert names == sorted(names)
    assert all(hasattr(podserve.bench, name) for name in names)
