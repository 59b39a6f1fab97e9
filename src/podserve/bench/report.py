"""A benchmark result as JSON (for machines) and Markdown (for people)."""

from __future__ import annotations

from pathlib import Path

import orjson

from podserve.bench.stats import Distribution, StepSummary
from podserve.bench.sweep import BenchResult


def result_dict(result: BenchResult) -> dict[str, object]:
    advice = result.advice
    return {
        "started_at": result.started_at,
        "plan": result.plan,
        "client": result.client,
        "steps": [_step_dict(s.summary) for s in result.steps],
        "ceiling": result.ceiling,
        "knee": result.knee,
        "autoscaling": None
        if advice is None
        else {
            "metric": advice.metric,
            "target": advice.target,
            "operating_level": advice.operating_level,
            "in_flight_at_level": advice.in_flight_at_level,
            "reason": advice.reason,
            "spec_fragment": advice.spec_fragment(),
        },
    }


def _step_dict(summary: StepSummary) -> dict[str, object]:
    # orjson serialises the (slotted) dataclasses, nested distributions included.
    loaded: dict[str, object] = orjson.loads(orjson.dumps(summary))
    return loaded


def to_json(result: BenchResult) -> bytes:
    return orjson.dumps(result_dict(result), option=orjson.OPT_INDENT_2)


def _ms(dist: Distribution | None, field: str) -> str:
    if dist is None:
        return "-"
    value: float = getattr(dist, field)
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def steps_table(summaries: list[StepSummary]) -> str:
    if not summaries:
        return "_no steps were run_\n"
    mode = summaries[0].mode
    streamed = any(s.ttft_ms is not None for s in summaries)
    with_slo = any(s.slo_met is not None for s in summaries)
    header = [mode, "req/s", "p50 ms", "p90 ms", "p99 ms", "errors", "in flight", "client CPU"]
    if streamed:
        header += ["TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "ITL p99", "tok/s"]
    if with_slo:
        header += ["goodput", "SLO met"]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for s in summaries:
        errors = ", ".join(f"{k}: {v}" for k, v in sorted(s.errors.items())) or "0"
        cells = [
            f"{s.level:g}",
            _fmt(s.throughput_rps),
            _ms(s.latency_ms, "p50"),
            _ms(s.latency_ms, "p90"),
            _ms(s.latency_ms, "p99"),
            errors,
            _fmt(s.mean_in_flight),
            f"{s.client_cpu_fraction:.0%}",
        ]
        if streamed:
            cells += [
                _ms(s.ttft_ms, "p50"),
                _ms(s.ttft_ms, "p99"),
                _ms(s.tpot_ms, "p50"),
                _ms(s.tpot_ms, "p99"),
                _ms(s.itl_ms, "p99"),
                _fmt(s.output_tokens_per_s),
            ]
        if with_slo:
            attained = "-" if s.slo_attainment is None else f"{s.slo_attainment:.1%}"
            cells += [_fmt(s.goodput_rps), f"{'yes' if s.slo_met else 'no'} ({attained})"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def to_markdown(result: BenchResult, plot_files: list[Path] | None = None) -> str:
    plan = result.plan
    lines = [
        "# podserve bench",
        "",
        f"- target: `{plan['target']}` — {plan['workload']}",
        f"- load: {plan['mode']} {plan['levels']}"
        + (f", {plan['arrival']} arrivals" if plan.get("arrival") else ""),
        f"- each step: warm-up {plan['warmup_s']} s, then "
        + (
            f"{plan['duration_s']} s"
            if plan["duration_s"] is not None
            else f"{plan['requests_per_step']} requests"
        ),
        f"- SLO: {plan['slo']} (met when ≥ {plan['slo_attainment_target']:.0%} of requests "
        "meet it)",
        f"- client: python {result.client['python']}, uvloop {result.client['uvloop']}; "
        f"started {result.started_at}",
        "",
        steps_table(result.summaries),
    ]
    unit = "concurrency" if plan["mode"] == "concurrency" else "req/s"
    if result.ceiling is not None:
        lines.append(f"**Ceiling:** the SLO holds up to {unit} {result.ceiling:g}.")
    elif plan["slo"] != "none":
        lines.append("**Ceiling:** the SLO did not hold at the lowest level measured.")
    if result.knee is not None:
        lines.append(
            f"**Knee** (lowest load reaching 90% of peak throughput): {unit} {result.knee:g}."
        )
    if result.advice is not None:
        lines += [
            "",
            "Autoscaling (`ModelService` fragment):",
            "",
            "```yaml",
            result.advice.spec_fragment().rstrip(),
            "```",
        ]
    saturated = [s for s in result.summaries if s.client_cpu_fraction > 0.9]
    if saturated:
        lines += [
            "",
            f"> Warning: the load generator used over 90% of a core at {unit} "
            f"{', '.join(f'{s.level:g}' for s in saturated)}; those numbers may be the "
            "client's limit, not the server's (see `podserve bench --self-test`).",
        ]
    if plot_files:
        lines += ["", *(f"![{p.stem}]({p.name})" for p in plot_files)]
    return "\n".join(lines) + "\n"


def write_outputs(result: BenchResult, out_dir: Path, *, plots: bool = True) -> dict[str, Path]:
    """Write result.json, report.md and (optionally) PNG plots into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    plot_files: list[Path] = []
    if plots:
        from podserve.bench.plots import write_plots

        plot_files = write_plots(result, out_dir)
        written.update({p.stem: p for p in plot_files})
    json_path = out_dir / "result.json"
    json_path.write_bytes(to_json(result))
    md_path = out_dir / "report.md"
    md_path.write_text(to_markdown(result, plot_files))
    written["json"] = json_path
    written["markdown"] = md_path
    return written
