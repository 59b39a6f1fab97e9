"""benchmarks/table.py's report: the summary table, the ratios against their goals
(medians of per-round ratios), the per-step CPU lines, and the optional PNG."""

from __future__ import annotations

import os
import platform
import statistics
from pathlib import Path
from typing import Any

from peers.contenders import LABELS as PEER_LABELS

# Triton's streaming gRPC API as the benchmark drives it (table_measure.GRPC_STREAMS).
STREAM = "podserve-on grpc stream"


def summary_table(result: dict[str, Any]) -> str:
    raw, steps = result["raw"], result["steps"]

    def cell(key: str, name: str, field: str) -> str:
        values = [s[field] for s in steps.get(key, {}).get(name, [])]
        if not values:
            return "—"
        mid = statistics.median(values)
        digits = 2 if field == "p50_ms" else 0
        spread = f" ({min(values):.{digits}f}..{max(values):.{digits}f})" if len(values) > 1 else ""
        return f"{mid:,.{digits}f}{spread}"

    def limit(workload: str, key: str, fmt: str) -> str:
        value = raw.get(workload, {}).get(key)
        return "—" if value is None else format(value, fmt)

    lines = [
        "| | W1 c=1 p50 ms | W1 c=64 req/s | W2 c=1 p50 ms | W2 c=64 req/s | idle CPU | "
        "SIGTERM→exit (idle) |",
        "|---|---|---|---|---|---|---|",
        f"| raw (model called directly) | {limit('w1', 'c1_p50_ms', '.2f')} | "
        f"{limit('w1', 'b32_items_s', ',.0f')} items/s (b32) | {limit('w2', 'c1_p50_ms', '.1f')} "
        f"| {limit('w2', 'b32_items_s', ',.0f')} items/s (b32) | — | — |",
    ]
    known = {
        "raw",
        "podserve-on",
        "podserve-off",
        "fastapi",
        "podserve-on grpc",
        STREAM,
        *PEER_LABELS,
    }
    variants = sorted({n for by in steps.values() for n in by} - known)
    idle_cpu = result.get("idle_cpu_cores", {})
    exits = result.get("sigterm_exit_s", {})
    for name, label, idle_key in (
        ("podserve-on", "podserve, batching on", "podserve-on"),
        ("podserve-off", "podserve, batching off", "podserve-off"),
        *((v, f"{v} (variant, batching on)", v) for v in variants),
        ("fastapi", "hand-rolled FastAPI", "fastapi-w1"),
        ("podserve-on grpc", "podserve on, gRPC", None),
        (STREAM, "podserve on, gRPC stream (ModelStreamInfer)", None),
        *((peer, label, None) for peer, label in PEER_LABELS.items()),
    ):
        if not any(name in by for by in steps.values()):
            continue
        idle_value = idle_cpu.get(idle_key) if idle_key else None
        exit_s_value = exits.get(idle_key) if idle_key else None
        idle = f"{idle_value:.3f}" if idle_value is not None else "—"
        exit_s = f"{exit_s_value:.2f} s" if exit_s_value is not None else "—"
        lines.append(
            f"| {label} | {cell('w1_c1', name, 'p50_ms')} | {cell('w1_c64', name, 'rps')} | "
            f"{cell('w2_c1', name, 'p50_ms')} | {cell('w2_c64', name, 'rps')} | {idle} | {exit_s} |"
        )
    return "\n".join(lines)


def cpu_ms_per_request(step: dict[str, Any]) -> float:
    """The server's CPU per request (ms): its cores over the step ÷ requests per second.
    For the raw contender, this process's CPU per item."""
    return float(1000 * step["server_cores"] / max(step["rps"], 1e-9))


def _value(step: dict[str, Any], field: str) -> float:
    return cpu_ms_per_request(step) if field == "cpu_ms" else float(step[field])


def ratio(steps: dict[str, Any], key: str, top: str, bottom: str, field: str) -> float | None:
    """`top` ÷ `bottom` on `field` in cell `key`: the median of the per-round ratios when
    both ran in every round (neighbours in time, so drift on the shared machine cancels),
    else the ratio of the medians; None when either is missing."""
    a, b = steps.get(key, {}).get(top), steps.get(key, {}).get(bottom)
    if not a or not b:
        return None
    if len(a) == len(b):
        return statistics.median(
            _value(x, field) / _value(y, field) for x, y in zip(a, b, strict=True)
        )
    return statistics.median(_value(x, field) for x in a) / statistics.median(
        _value(y, field) for y in b
    )


def ratios(result: dict[str, Any]) -> list[tuple[str, float, str, bool]]:
    raw, steps = result["raw"], result["steps"]
    grpc, on = "podserve-on grpc", "podserve-on"
    wanted: list[tuple[str, str, str, str, str, str, bool]] = [
        # (label, cell, top, bottom, field, goal, lower is better)
        ("W2 c=1 p50: batching on ÷ raw", "w2_c1", on, "raw", "p50_ms", "≤ 1.1", True),
        ("W2 c=1 p50: batching on ÷ off", "w2_c1", on, "podserve-off", "p50_ms", "≤ 1.05", True),
        ("W2 c=1 p50: gRPC ÷ REST", "w2_c1", grpc, on, "p50_ms", "≤ 1", True),
        ("W1 c=1 p50: batching on ÷ off", "w1_c1", on, "podserve-off", "p50_ms", "≤ 1.05", True),
        ("W1 c=1 p50: gRPC ÷ REST", "w1_c1", grpc, on, "p50_ms", "≤ 1", True),
        ("W2 c=64 req/s ÷ raw b32 items/s", "w2_c64", on, "raw", "rps", "≥ 0.9", False),
        ("W2 c=64 req/s: gRPC ÷ REST", "w2_c64", grpc, on, "rps", "≥ 1", False),
        ("W1 c=64 req/s ÷ FastAPI", "w1_c64", on, "fastapi", "rps", "≥ 1.5", False),
        ("W1 c=64 req/s: gRPC ÷ REST", "w1_c64", grpc, on, "rps", "≥ 1", False),
        ("W1 c=1 p50: gRPC stream ÷ REST", "w1_c1", STREAM, on, "p50_ms", "≤ 1", True),
        ("W1 c=64 req/s: gRPC stream ÷ REST", "w1_c64", STREAM, on, "rps", "≥ 1", False),
        ("W2 c=1 p50: gRPC stream ÷ REST", "w2_c1", STREAM, on, "p50_ms", "≤ 1", True),
        ("W2 c=64 req/s: gRPC stream ÷ REST", "w2_c64", STREAM, on, "rps", "≥ 1", False),
    ]
    for key in ("w1_c1", "w1_c64", "w2_c1", "w2_c64"):
        label = key.replace("_c", " c=").upper().replace("C=", "c=")
        wanted.append(
            (
                f"{label} server CPU per request: gRPC ÷ REST",
                key,
                grpc,
                on,
                "cpu_ms",
                "(report)",
                True,
            )
        )
        wanted.append(
            (f"{label} CPU per request: server ÷ raw", key, on, "raw", "cpu_ms", "(report)", True)
        )
    others = {"raw", on, "podserve-off", "fastapi", grpc, STREAM, *PEER_LABELS}
    variants = sorted({n for by in steps.values() for n in by} - others)
    for peer in PEER_LABELS:  # podserve (batching on) against each peer measured
        if not any(peer in by for by in steps.values()):
            continue
        for key in steps:
            for field, what, lower in (("p50_ms", "p50", True), ("rps", "req/s", False)):
                label = f"{key} {what}: podserve-on ÷ {peer}"
                wanted.append((label, key, on, peer, field, "(report)", lower))
    for variant in variants:  # an A/B: the variant against the same edge of podserve-on
        base = grpc if variant.endswith(" grpc") else on
        for key in steps:
            for field, what in (("p50_ms", "p50"), ("rps", "req/s"), ("cpu_ms", "CPU/req")):
                wanted.append(
                    (
                        f"{key} {what}: {variant} ÷ {base}",
                        key,
                        variant,
                        base,
                        field,
                        "(report)",
                        True,
                    )
                )
    rows = []
    for label, key, top, bottom, field, goal, lower in wanted:
        value = ratio(steps, key, top, bottom, field)
        if value is None and bottom == "raw" and field != "cpu_ms" and top in steps.get(key, {}):
            # a result written before raw ran in the rounds: its limit from before/after
            limit = raw.get(key[:2], {}).get("c1_p50_ms" if field == "p50_ms" else "b32_items_s")
            if limit:
                value = statistics.median(s[field] for s in steps[key][top]) / limit
        if value is not None:
            rows.append((label, value, goal, lower))
    per_core = ratio(steps, "w1_c64", on, "fastapi", "cpu_ms")
    if per_core is not None:  # req/s per core is the inverse of CPU per request
        rows.append(
            ("W1 c=64 server req/s per core: podserve ÷ FastAPI", 1 / per_core, "(report)", False)
        )
    return rows


def verdict(value: float, goal: str, lower_is_better: bool) -> str:
    if not goal.startswith(("≤", "≥")):
        return "—"
    limit = float(goal.split()[1])
    ok = value <= limit if lower_is_better else value >= limit
    return "PASS" if ok else "FAIL"


def report(result: dict[str, Any]) -> str:
    lines = [
        f"Run {result['started']} on {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"load average at start {result['load_average_start']}, at end "
        f"{result['load_average_end']}. Medians of the rounds, (min..max) beside them.",
        "",
        summary_table(result),
        "",
        "| ratio | measured | goal | result |",
        "|---|---|---|---|",
    ]
    for name, value, goal, lower in ratios(result):
        lines.append(f"| {name} | {value:.2f}x | {goal} | {verdict(value, goal, lower)} |")
    lines.append("")
    for key, by_name in result["steps"].items():
        for name, values in by_name.items():
            cores = ", ".join(
                f"client {s['client_cores']:.2f} / server {s['server_cores']:.2f}" for s in values
            )
            cpu = statistics.median(cpu_ms_per_request(s) for s in values)
            batches = ", ".join(f"{s.get('rows_per_call', float('nan')):.1f}" for s in values)
            lines.append(
                f"- {key} {name}: server CPU {cpu:.3f} ms per request (median); "
                f"cores per round {cores}; rows per model call {batches}"
            )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Bars of every server's median per cell (c=64 req/s, c=1 p50), min..max as error
    bars, the raw limit as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = (
        ("w1_c64", "rps", "W1 c=64 req/s", "b32_items_s"),
        ("w2_c64", "rps", "W2 c=64 req/s", "b32_items_s"),
        ("w1_c1", "p50_ms", "W1 c=1 p50 ms", "c1_p50_ms"),
        ("w2_c1", "p50_ms", "W2 c=1 p50 ms", "c1_p50_ms"),
    )
    figure, axes = plt.subplots(1, 4, figsize=(16, 4.5))
    for axis, (key, field, title, raw_key) in zip(axes, cells, strict=True):
        by_name = result["steps"].get(key, {})
        names = list(by_name)
        values = [[s[field] for s in by_name[n]] for n in names]
        mids = [statistics.median(v) for v in values]
        low = [m - min(v) for m, v in zip(mids, values, strict=True)]
        high = [max(v) - m for m, v in zip(mids, values, strict=True)]
        axis.bar(range(len(names)), mids, yerr=[low, high], capsize=3, color="tab:blue")
        workload = key.split("_")[0]
        raw = result["raw"].get(workload, {}).get(raw_key)
        axis.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
        if raw is None:
            axis.set_title(title, fontsize=10)
        elif mids and raw > 3 * max(mids):  # off the scale: a number, not a line
            axis.set_title(f"{title} (raw {raw:,.0f})", fontsize=10)
        else:
            axis.axhline(raw, color="tab:red", linestyle="--")
            axis.set_title(f"{title} (red: raw)", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)
    plt.close(figure)


def _nan_for_null(result: dict[str, Any]) -> dict[str, Any]:
    """A result read back: JSON has no NaN, so orjson wrote the steps' NaNs as null."""
    for by_name in result.get("steps", {}).values():
        for values in by_name.values():
            for step in values:
                for key, value in step.items():
                    if value is None:
                        step[key] = float("nan")
    return result
