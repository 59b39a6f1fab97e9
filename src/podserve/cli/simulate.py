"""`podserve simulate INPUT --cluster CLUSTER.yaml --out DIR`: see what a manifest will do on
a cluster before applying it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

LONG_SIMULATION_S = 6 * 3600
MAX_DURATION_S = 31 * 86400  # a timeline record per second must fit in memory


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="play manifests on a described cluster under a traffic trace",
        description="Simulate a ModelService spec (rendered internally) or rendered manifests "
        "on the cluster a Cluster file describes, under a traffic trace: scheduling, "
        "rollouts, HPA/KEDA, PDBs, termination, spot reclaims and the cluster autoscaler on a "
        "virtual clock. Writes DIR/summary.json, DIR/timeline.json and DIR/timeline.png; "
        "see docs/simulate.md.",
    )
    parser.add_argument("input", help="ModelService YAML or rendered manifests (- for stdin)")
    parser.add_argument("--cluster", required=True, type=Path, help="Cluster YAML file")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    traffic = parser.add_mutually_exclusive_group()
    traffic.add_argument("--traffic", type=Path, help="CSV of seconds,requests_per_second")
    traffic.add_argument("--rate", type=float, help="constant requests per second")
    parser.add_argument("--bench", type=Path, help="`podserve bench` result.json (capacity)")
    parser.add_argument(
        "--event",
        action="append",
        default=[],
        metavar="KIND@SECONDS[:ARG]",
        help="rollout@T[:WORKLOAD], spot-reclaim@T:POOL, node-drain@T:NODE, "
        "metrics-down@T:SECONDS (repeatable)",
    )
    parser.add_argument(
        "--duration",
        type=int,
        help="simulated seconds (default: the trace's last timestamp, or 3600 with --rate)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the Poisson arrivals")
    parser.add_argument(
        "--format", choices=["text", "json"], default="text", help="what to print on stdout"
    )
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    import json

    from podserve.core.errors import PodserveError
    from podserve.kube.simulate import (
        Options,
        Simulation,
        bench_capacity,
        build_summary,
        constant,
        load_cluster,
        manifests_from_text,
        parse_event,
        parse_trace,
        scenario_from_manifests,
        text_summary,
    )
    from podserve.kube.simulate.output import write_outputs

    try:
        text = sys.stdin.read() if args.input == "-" else Path(args.input).read_text()
        cluster = load_cluster(args.cluster.read_text(), str(args.cluster))
        if args.traffic is not None:
            trace = parse_trace(args.traffic.read_text(), str(args.traffic))
            default_duration = int(trace.end_s) if trace.end_s >= 1 else 3600
        else:
            trace = constant(args.rate if args.rate is not None else 0.0)
            default_duration = 3600
        duration = args.duration if args.duration is not None else default_duration
        if not 1 <= duration <= MAX_DURATION_S:
            raise _usage(f"--duration must be between 1 and {MAX_DURATION_S} s (31 days)")
        bench = None
        if args.bench is not None:
            try:
                bench = bench_capacity(json.loads(args.bench.read_text()))
            except json.JSONDecodeError as exc:
                raise _usage(f"--bench {args.bench} is not JSON: {exc}") from exc
        events = tuple(sorted((parse_event(e) for e in args.event), key=lambda e: e.t))
        manifests = manifests_from_text(text, args.input)
        scenario = scenario_from_manifests(manifests, bench)
        progress = _progress if duration >= LONG_SIMULATION_S else None
        options = Options(duration_s=duration, seed=args.seed, events=events, progress=progress)
        result = Simulation(scenario, cluster, trace, options).run()
    except (OSError, PodserveError) as exc:
        print(f"podserve simulate: {exc}", file=sys.stderr)
        return 2
    summary = build_summary(result, args.seed, scenario.ignored)
    title = f"{Path(args.input).name} on {cluster.metadata.name}"
    try:
        write_outputs(result, summary, args.out, title)
    except OSError as exc:
        print(f"podserve simulate: cannot write to {args.out}: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        sys.stdout.write(text_summary(summary))
        print(f"wrote summary.json, timeline.json, timeline.png to {args.out}", file=sys.stderr)
    return 0


def _usage(message: str) -> Exception:
    from podserve.core.errors import InvalidInput

    return InvalidInput(message)


def _progress(done: int, total: int) -> None:
    print(f"simulated {done}/{total} s ({done / total:.0%})", file=sys.stderr, flush=True)
