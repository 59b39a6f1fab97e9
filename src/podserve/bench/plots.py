"""PNG plots of a benchmark: latency percentiles and throughput against the load level,
and, for token streams, the TTFT and TPOT distributions per level.

matplotlib is imported here only (Agg backend: no display needed, safe in CI and pods).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from podserve.bench.sweep import BenchResult


def _pyplot() -> tuple[Any, Any]:
    try:
        import matplotlib
    except ImportError as exc:
        raise RuntimeError(
            "plots need matplotlib: pip install 'podserve[bench]' (or pass --no-plots)"
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker as ticker

    return plt, ticker


def write_plots(result: BenchResult, out_dir: Path) -> list[Path]:
    plt, ticker = _pyplot()
    summaries = [s for s in result.summaries if s.latency_ms is not None]
    if not summaries:
        return []
    unit = "concurrency" if summaries[0].mode == "concurrency" else "offered rate (req/s)"
    levels = [s.level for s in summaries]
    written: list[Path] = []

    fig, (ax_lat, ax_tput) = plt.subplots(1, 2, figsize=(11, 4.2))
    for field, style in (("p50", "o-"), ("p90", "s--"), ("p99", "^-")):
        ax_lat.plot(levels, [getattr(s.latency_ms, field) for s in summaries], style, label=field)
    ax_lat.set_xlabel(unit)
    ax_lat.set_ylabel("latency (ms)")
    ax_lat.set_title("Latency percentiles")
    ax_tput.plot(levels, [s.throughput_rps for s in summaries], "o-", label="throughput")
    if any(s.goodput_rps is not None for s in summaries):
        ax_tput.plot(levels, [s.goodput_rps or 0.0 for s in summaries], "s--", label="goodput")
    ax_tput.set_xlabel(unit)
    ax_tput.set_ylabel("requests / s")
    ax_tput.set_title("Throughput")
    for ax in (ax_lat, ax_tput):
        if len(levels) > 2 and max(levels) / max(min(levels), 1e-9) >= 8:
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(ticker.ScalarFormatter())
        if result.ceiling is not None:
            ax.axvline(result.ceiling, color="green", alpha=0.4, label="SLO ceiling")
        if result.knee is not None:
            ax.axvline(result.knee, color="gray", linestyle=":", alpha=0.6, label="knee")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path = out_dir / "latency_throughput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    streamed = [s for s in result.steps if np.isfinite(s.ttft_s).any()]
    if streamed:
        fig, (ax_ttft, ax_tpot) = plt.subplots(1, 2, figsize=(11, 4.2))
        for step in streamed:
            label = f"{step.summary.level:g}"
            ttft = step.ttft_s[np.isfinite(step.ttft_s)] * 1000
            tpot = step.tpot_s[np.isfinite(step.tpot_s)] * 1000
            ax_ttft.hist(ttft, bins=40, histtype="step", label=label)
            if tpot.size:
                ax_tpot.hist(tpot, bins=40, histtype="step", label=label)
        ax_ttft.set_xlabel("TTFT (ms)")
        ax_tpot.set_xlabel("TPOT (ms)")
        for ax in (ax_ttft, ax_tpot):
            ax.set_ylabel("requests")
            ax.grid(alpha=0.3)
            ax.legend(title=unit)
        ax_ttft.set_title("Time to first token")
        ax_tpot.set_title("Time per output token")
        fig.tight_layout()
        path = out_dir / "ttft_tpot.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
