"""A run (and its comparison with a baseline) as text for a terminal or a Job log, JSON for
machines, or Markdown for a pull request or a CI summary."""

from __future__ import annotations

from typing import Any

import orjson

from podserve.evaluation.baseline import Comparison
from podserve.evaluation.results import RunResult


def _headline(result: RunResult) -> str:
    ratio = result.ratios()["all"]
    return (
        f"suite {result.suite} against {result.url}: {ratio.passed}/{ratio.total} cases passed "
        f"({ratio.value:.1%}) in {result.duration_s:.2f}s"
    )


def _rows(result: RunResult, comparison: Comparison | None) -> list[list[str]]:
    rows = []
    for tag, ratio in result.ratios().items():
        before = comparison.baseline_ratios.get(tag) if comparison else None
        rows.append(
            [
                tag,
                str(ratio.passed),
                str(ratio.total),
                f"{ratio.value:.1%}",
                "—" if before is None else f"{before:.1%}",
            ]
        )
    return rows


_HEADER = ["tag", "passed", "total", "ratio", "baseline"]


def _comparison_lines(comparison: Comparison | None) -> list[str]:
    if comparison is None:
        return []
    lines = [f"REGRESSION: {reason}" for reason in comparison.reasons()]
    if comparison.newly_failing:
        lines.append("newly failing: " + ", ".join(comparison.newly_failing))
    if comparison.newly_passing:
        lines.append("newly passing: " + ", ".join(comparison.newly_passing))
    if comparison.missing:
        lines.append("in the baseline, not in this suite: " + ", ".join(comparison.missing))
    if not comparison.regressed:
        lines.append(f"no regression against the baseline (max drop {comparison.max_drop:.1%})")
    return lines


def to_text(result: RunResult, comparison: Comparison | None = None) -> str:
    rows = [_HEADER, *_rows(result, comparison)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    lines = [_headline(result), ""]
    for row in rows:
        cells = (cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        lines.append(("  " + "  ".join(cells)).rstrip())
    failed = [case for case in result.cases if not case.passed]
    if failed:
        lines.append("")
    for case in failed:
        tags = f" [{', '.join(case.tags)}]" if case.tags else ""
        lines.append(f"FAIL {case.id}{tags}")
        lines += [f"    {reason}" for reason in case.reasons]
    extra = _comparison_lines(comparison)
    if extra:
        lines += ["", *extra]
    return "\n".join(lines) + "\n"


def to_json(result: RunResult, comparison: Comparison | None = None) -> str:
    document: dict[str, Any] = result.to_dict()
    if comparison is not None:
        document["comparison"] = {
            "regressed": comparison.regressed,
            "reasons": comparison.reasons(),
            "max_drop": comparison.max_drop,
            "strict_cases": comparison.strict_cases,
            "baseline_ratios": comparison.baseline_ratios,
            "newly_failing": list(comparison.newly_failing),
            "newly_passing": list(comparison.newly_passing),
            "missing": list(comparison.missing),
        }
    return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(result: RunResult, comparison: Comparison | None = None) -> str:
    lines = [f"## Eval: {result.suite}", "", _headline(result), ""]
    lines.append("| " + " | ".join(_HEADER) + " |")
    lines.append("|" + "---|" * len(_HEADER))
    lines += ["| " + " | ".join(row) + " |" for row in _rows(result, comparison)]
    failed = [case for case in result.cases if not case.passed]
    if failed:
        lines += ["", "### Failed cases", "", "| case | tags | reasons |", "|---|---|---|"]
        for case in failed:
            lines.append(
                f"| `{_cell(case.id)}` | {_cell(', '.join(case.tags))} | "
                f"{'<br>'.join(_cell(r) for r in case.reasons)} |"
            )
    extra = _comparison_lines(comparison)
    if extra:
        lines += ["", *(f"- {line}" for line in extra)]
    return "\n".join(lines) + "\n"


FORMATTERS = {"text": to_text, "json": to_json, "markdown": to_markdown}
