"""Writing a simulation's results: summary.json, timeline.json (one record per simulated
second) and timeline.png (matplotlib, imported only here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson

from podserve.kube.simulate.engine import COLUMNS, Result

INTEGER_COLUMNS = {
    "replicas_desired",
    "replicas_ready",
    "pending_pods",
    "offered",
    "served",
    "rejected",
    "cut",
    "gpus_in_use",
    "nodes",
}


def timeline_records(result: Result) -> list[dict[str, Any]]:
    columns = {
        name: (
            result.timeline[name].astype(np.int64).tolist()
            if name in INTEGER_COLUMNS
            else np.round(result.timeline[name], 4).tolist()
        )
        for name in COLUMNS
    }
    return [
        {"t": t, **{name: columns[name][t] for name in COLUMNS}} for t in range(result.duration_s)
    ]


def write_json(path: Path, data: object) -> None:
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))


def write_plot(result: Result, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timeline = result.timeline
    t = np.arange(result.duration_s)
    hours = result.duration_s > 4 * 3600
    x = t / 3600.0 if hours else t / 60.0
    unit = "hours" if hours else "minutes"
    fig, axes = plt.subplots(3, 1, figsize=(11, 8), sharex=True)
    axes[0].step(x, timeline["replicas_desired"], where="post", label="desired replicas")
    axes[0].step(x, timeline["replicas_ready"], where="post", label="ready replicas")
    axes[0].step(x, timeline["pending_pods"], where="post", label="pending pods", alpha=0.6)
    axes[0].set_ylabel("pods")
    axes[1].plot(x, timeline["offered"], label="offered req/s", linewidth=0.8)
    axes[1].plot(x, timeline["served"], label="served req/s", linewidth=0.8)
    axes[1].plot(x, timeline["rejected"], label="rejected (503) req/s", linewidth=0.8)
    axes[1].plot(x, timeline["cut"], label="cut req/s", linewidth=0.8)
    axes[1].set_ylabel("requests / s")
    axes[2].plot(
        x, timeline["latency_p99_s"], label="p99 latency (s)", color="tab:red", linewidth=0.8
    )
    axes[2].set_ylabel("seconds")
    axes[2].set_xlabel(f"simulated time ({unit})")
    scale = 3600.0 if hours else 60.0
    for event in result.events:
        for ax in axes:
            ax.axvline(event.t / scale, color="black", linestyle="--", linewidth=0.8)
        axes[0].annotate(
            event.label(),
            (event.t / scale, axes[0].get_ylim()[1]),
            rotation=90,
            va="top",
            ha="right",
            fontsize=7,
        )
    for ax in axes:
        ax.legend(loc="upper left", fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_outputs(result: Result, summary: dict[str, Any], out_dir: Path, title: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "summary.json", out_dir / "timeline.json", out_dir / "timeline.png"]
    write_json(paths[0], summary)
    write_json(paths[1], timeline_records(result))
    write_plot(result, paths[2], title)
    return paths
