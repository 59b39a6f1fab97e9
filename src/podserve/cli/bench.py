"""`podserve bench`: load-test an OIP v2 or OpenAI-compatible endpoint, find its SLO
ceiling, and recommend an autoscaling target."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from podserve.bench.sweep import BenchPlan, BenchResult

_EXAMPLES = """\
examples:
  podserve bench --model-dir examples/models/iris --concurrency 1,4,16,64
  podserve bench --model iris --input input-0:1x4:FP32 --rate 100,200,400 --arrival bursty
  podserve bench --api openai-chat --model tiny --prompt-tokens 64..512 --max-tokens 128 \\
      --concurrency auto --slo ttft=500ms,tpot=50ms --out bench-out
  podserve bench --self-test
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="load-test a model endpoint and find its SLO ceiling",
        description=__doc__,
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    target = parser.add_argument_group("target and payloads")
    target.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL")
    target.add_argument(
        "--api", choices=["oip", "openai-chat", "openai-completions"], default="oip"
    )
    target.add_argument("--model", help="model name (default: from --model-dir)")
    target.add_argument(
        "--model-dir", type=Path, help="model directory: name and inputs from its model.yaml"
    )
    target.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME:SHAPE:DTYPE",
        help="an OIP input to generate, e.g. input-0:1x4:FP32 (repeatable)",
    )
    target.add_argument(
        "--payload-file", type=Path, help="request bodies: .jsonl (one a line) or .json"
    )
    target.add_argument("--path", help="URL path for --payload-file (default from --api)")
    target.add_argument("--header", action="append", default=[], metavar="NAME:VALUE")
    target.add_argument("--prompt-tokens", default="128", help="N, LOW..HIGH or lognormal:M:S")
    target.add_argument("--max-tokens", default="64", help="N, LOW..HIGH or lognormal:M:S")
    target.add_argument("--no-stream", action="store_true", help="OpenAI: ask for no SSE")
    target.add_argument("--ignore-eos", action="store_true", help="OpenAI: send ignore_eos")
    target.add_argument("--seed", type=int, default=0)

    load = parser.add_argument_group("load")
    shape = load.add_mutually_exclusive_group()
    shape.add_argument("--concurrency", help="closed loop: 1,2,4,... or auto (default 1)")
    shape.add_argument("--rate", help="open loop, req/s: 10,20,... or auto")
    load.add_argument("--arrival", choices=["poisson", "bursty", "constant"], default="poisson")
    load.add_argument(
        "--burstiness", type=float, default=0.5, help="gamma shape for bursty (<1 burstier)"
    )
    load.add_argument("--max-connections", type=int, default=1024, help="open loop cap")
    load.add_argument("--max-level", type=float, default=1024, help="auto search stops here")
    budget = load.add_mutually_exclusive_group()
    budget.add_argument("--duration", default=None, help="per step, e.g. 10s (default)")
    budget.add_argument("--requests", type=int, help="per step, instead of a duration")
    load.add_argument("--warmup", default="1s", help="per step, not measured")
    load.add_argument("--timeout", default="30s", help="per request")

    slo = parser.add_argument_group("SLO and autoscaling")
    slo.add_argument("--slo", default="", help="e.g. ttft=200ms,tpot=50ms,e2e=1s")
    slo.add_argument(
        "--slo-attainment",
        type=float,
        default=0.99,
        help="fraction of requests that must meet the SLO for a step to pass",
    )
    slo.add_argument("--headroom", type=float, default=0.8, help="target = in-flight x this")
    slo.add_argument("--autoscale-metric", choices=["inflight", "queue-depth"], default="inflight")
    slo.add_argument(
        "--server-slots",
        type=int,
        help="requests the server runs at once (max batch size x instances); for queue-depth",
    )

    out = parser.add_argument_group("output")
    out.add_argument("--out", type=Path, help="write result.json, report.md and PNG plots here")
    out.add_argument("--no-plots", action="store_true")
    out.add_argument("--no-progress", action="store_true", help="no live display")
    out.add_argument(
        "--self-test",
        action="store_true",
        help="measure this client's own ceiling against a trivial local server",
    )
    out.add_argument("--self-test-server", choices=["raw", "uvicorn"], default="raw")
    parser.set_defaults(run=_run)


def _levels(text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return (1.0,)
    if text.strip().lower() == "auto":
        return None
    try:
        levels = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"levels {text!r} must be comma-separated numbers or 'auto'") from None
    if not levels or any(level <= 0 for level in levels):
        raise ValueError(f"levels {text!r} must be positive")
    return levels


def build_plan(args: argparse.Namespace) -> BenchPlan:
    from podserve.bench.loop import Budget
    from podserve.bench.stats import Slo, parse_duration_s
    from podserve.bench.sweep import BenchPlan, Mode
    from podserve.bench.workloads import (
        FileWorkload,
        LengthDistribution,
        OipWorkload,
        OpenAIWorkload,
        Target,
        TensorInput,
        Workload,
        inputs_from_model_dir,
    )

    headers = {}
    for header in args.header:
        name, sep, value = header.partition(":")
        if not sep:
            raise ValueError(f"--header {header!r} must look like NAME:VALUE")
        headers[name.strip()] = value.strip()
    workload: Workload
    openai = args.api.startswith("openai")
    if args.payload_file is not None:
        default_path = {
            "oip": f"/v2/models/{args.model}/infer",
            "openai-chat": "/v1/chat/completions",
            "openai-completions": "/v1/completions",
        }[args.api]
        if args.path is None and args.api == "oip" and not args.model:
            raise ValueError("--payload-file for OIP needs --model or --path")
        workload = FileWorkload(
            args.payload_file, args.path or default_path, stream=openai and not args.no_stream
        )
    elif openai:
        if not args.model:
            raise ValueError("--api openai-* needs --model")
        workload = OpenAIWorkload(
            model=args.model,
            api="chat" if args.api == "openai-chat" else "completions",
            prompt_tokens=LengthDistribution.parse(args.prompt_tokens),
            max_tokens=LengthDistribution.parse(args.max_tokens),
            stream=not args.no_stream,
            ignore_eos=args.ignore_eos,
            seed=args.seed,
        )
    else:
        model_name: str | None = None
        inputs: tuple[TensorInput, ...] = ()
        if args.model_dir is not None:
            model_name, inputs = inputs_from_model_dir(args.model_dir)
        if args.input:
            inputs = tuple(TensorInput.parse(text) for text in args.input)
        model = args.model or model_name
        if not model or not inputs:
            raise ValueError("OIP needs --model-dir, or --model with --input NAME:SHAPE:DTYPE")
        workload = OipWorkload(model, inputs, seed=args.seed)

    mode: Mode = "rate" if args.rate is not None else "concurrency"
    budget = Budget(
        duration_s=None if args.requests else parse_duration_s(args.duration or "10s"),
        requests=args.requests,
        warmup_s=parse_duration_s(args.warmup),
        timeout_s=parse_duration_s(args.timeout),
    )
    return BenchPlan(
        target=Target.parse(args.url),
        workload=workload,
        mode=mode,
        levels=_levels(args.rate if mode == "rate" else args.concurrency),
        budget=budget,
        slo=Slo.parse(args.slo),
        attainment=args.slo_attainment,
        arrival=args.arrival,
        burstiness=args.burstiness,
        max_connections=args.max_connections,
        max_level=args.max_level,
        headers=headers,
        seed=args.seed,
        headroom=args.headroom,
        autoscale_metric=args.autoscale_metric,
        server_slots=args.server_slots,
    )


def _run(args: argparse.Namespace) -> int:
    from podserve.bench.client import run
    from podserve.bench.progress import LinePrinter, RichProgress
    from podserve.bench.report import to_markdown, write_outputs
    from podserve.bench.selftest import run_self_test
    from podserve.bench.sweep import StepObserver, run_plan
    from podserve.core.errors import PodserveError

    try:
        plan = None if args.self_test else build_plan(args)
    except (ValueError, OSError, PodserveError) as exc:
        print(f"podserve bench: {exc}", file=sys.stderr)
        return 2
    if plan is not None and plan.autoscale_metric == "queue-depth" and plan.server_slots is None:
        print(
            "podserve bench: --autoscale-metric queue-depth needs --server-slots", file=sys.stderr
        )
        return 2

    live = sys.stderr.isatty() and not args.no_progress
    rich_progress = RichProgress() if live else None
    observer: StepObserver = rich_progress if rich_progress is not None else LinePrinter()
    result: BenchResult
    if rich_progress is not None:
        rich_progress.__enter__()
    try:
        if plan is None:
            result, limits = run(run_self_test(args.self_test_server, observer=observer))
        else:
            result, limits = run(run_plan(plan, observer)), None
    except KeyboardInterrupt:
        print("podserve bench: interrupted", file=sys.stderr)
        return 130
    finally:
        if rich_progress is not None:
            rich_progress.__exit__(None, None, None)

    if args.out is not None:
        written = write_outputs(result, args.out, plots=not args.no_plots)
        print(f"wrote {', '.join(str(p) for p in written.values())}", file=sys.stderr)
    print(to_markdown(result))
    if limits is not None:
        print(f"Self-test: {limits.describe()}.")
    return 0 if any(s.ok for s in result.summaries) else 1
