"""The run as Prometheus metrics: written atomically to a node-exporter textfile-collector
path, or PUT to a Pushgateway under `/metrics/job/podserve_eval/suite/<suite>` (PUT replaces
the group, so a tag dropped from the suite does not linger with an old ratio).

Every metric is a gauge of the last run: `podserve_eval_cases_total` counts the cases of
that run by result, it does not accumulate across runs."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, write_to_textfile

from podserve.evaluation.results import RunResult

JOB = "podserve_eval"


def registry_of(result: RunResult) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    ratio = Gauge(
        "podserve_eval_pass_ratio",
        "Share of golden-set cases that passed in the last run (tag all: every case).",
        ["suite", "tag"],
        registry=registry,
    )
    for tag, value in result.ratios().items():
        ratio.labels(suite=result.suite, tag=tag).set(value.value)
    cases = Gauge(
        "podserve_eval_cases_total",
        "Cases of the last run by result (passed, failed).",
        ["suite", "result"],
        registry=registry,
    )
    passed = sum(case.passed for case in result.cases)
    cases.labels(suite=result.suite, result="passed").set(passed)
    cases.labels(suite=result.suite, result="failed").set(len(result.cases) - passed)
    last = Gauge(
        "podserve_eval_last_run_timestamp_seconds",
        "When the last run started (Unix seconds).",
        ["suite"],
        registry=registry,
    )
    last.labels(suite=result.suite).set(result.started_at_s)
    return registry


def write_textfile(result: RunResult, path: Path) -> None:
    """prometheus_client writes a temporary file beside `path` and renames it, so the
    collector never reads a partial file. The collector reads only `*.prom` files."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), registry_of(result))


def push(result: RunResult, gateway_url: str, *, timeout_s: float = 30.0) -> None:
    """PUT the metrics to a Pushgateway; raises OSError (URLError) when it cannot."""
    push_to_gateway(
        gateway_url,
        job=JOB,
        registry=registry_of(result),
        grouping_key={"suite": result.suite},
        timeout=timeout_s,
    )
