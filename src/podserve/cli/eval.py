"""`podserve eval`: run a golden set against a deployed endpoint, compare with a baseline,
export the pass ratios to Prometheus.

Exit codes: 0 pass; 1 a gate failed: a regression against --baseline, a pass ratio below
--min-pass-ratio, or, when neither is given, any failed case; 2 usage or suite error; 3 the
endpoint (or the Pushgateway) unreachable."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from podserve.evaluation import Comparison, RunResult

EXIT_PASS, EXIT_REGRESSION, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3

_EXAMPLES = """\
examples:
  podserve eval golden.jsonl --url http://127.0.0.1:8000 --save-baseline baseline.json
  podserve eval golden.jsonl --url http://fraud-score.risk.svc:8000 --baseline baseline.json \\
      --max-drop 0.02 --pushgateway http://pushgateway.monitoring.svc:9091
  podserve eval golden.jsonl --min-pass-ratio 0.95 --format markdown >> "$GITHUB_STEP_SUMMARY"
"""


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction between 0 and 1")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} must be positive")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="run a golden set against an endpoint and catch regressions",
        description=__doc__,
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("suite_path", metavar="SUITE.jsonl", type=Path, help="golden set")
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL")
    parser.add_argument("--suite", help="suite name in reports and metrics (default: file stem)")
    parser.add_argument(
        "--header", action="append", default=[], metavar="NAME:VALUE", help="extra header"
    )
    parser.add_argument("--concurrency", type=_positive_int, default=4)
    parser.add_argument("--timeout-s", type=_positive_float, default=30.0, help="per request")
    gates = parser.add_argument_group("gates")
    gates.add_argument("--baseline", type=Path, help="compare with this stored result")
    gates.add_argument("--save-baseline", type=Path, metavar="FILE", help="store this result")
    gates.add_argument(
        "--max-drop",
        type=_fraction,
        default=0.05,
        help="largest allowed fall of a pass ratio (overall or per tag) vs the baseline",
    )
    gates.add_argument(
        "--strict-cases",
        action="store_true",
        help="any case that passed in the baseline and fails now is a regression",
    )
    gates.add_argument(
        "--min-pass-ratio",
        type=_fraction,
        help="fail when the overall pass ratio is below (0: report only). Without this or "
        "--baseline, any failed case fails the run",
    )
    out = parser.add_argument_group("output")
    out.add_argument("--format", choices=["text", "json", "markdown"], default="text")
    out.add_argument("--textfile", type=Path, help="write metrics for the textfile collector")
    out.add_argument("--pushgateway", metavar="URL", help="push metrics to this Pushgateway")
    parser.set_defaults(run=_run)


def _headers(pairs: list[str]) -> dict[str, str]:
    headers = {}
    for pair in pairs:
        name, sep, value = pair.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"--header {pair!r} must look like NAME:VALUE")
        headers[name.strip()] = value.strip()
    return headers


def _export(args: argparse.Namespace, result: RunResult) -> str | None:
    """Write or push the metrics; the error message when that failed."""
    from podserve.evaluation import push, write_textfile

    try:
        if args.textfile is not None:
            write_textfile(result, args.textfile)
        if args.pushgateway:
            push(result, args.pushgateway, timeout_s=args.timeout_s)
    except OSError as exc:
        return f"cannot export metrics: {exc}"
    return None


def _verdict(
    args: argparse.Namespace, result: RunResult, comparison: Comparison | None
) -> tuple[int, list[str]]:
    from podserve.evaluation import gate

    verdict = gate(
        result,
        comparison,
        min_pass_ratio=args.min_pass_ratio,
        baseline_name=f"the baseline {args.baseline}",
    )
    return (EXIT_PASS if verdict.passed else EXIT_REGRESSION), list(verdict.problems)


def _run(args: argparse.Namespace) -> int:
    try:
        from podserve.evaluation import (
            HttpxTransport,
            compare,
            load_baseline,
            parse_suite,
            run_suite,
            save_baseline,
        )
        from podserve.evaluation.report import FORMATTERS
    except ImportError as exc:
        print(f"podserve eval: {exc}", file=sys.stderr)
        return EXIT_USAGE
    import asyncio
    import importlib.util

    if importlib.util.find_spec("httpx") is None:  # the client comes with the eval extra
        print("podserve eval: needs httpx: pip install 'podserve[eval]'", file=sys.stderr)
        return EXIT_USAGE

    from podserve.core.errors import PodserveError

    try:
        headers = _headers(args.header)
        text = args.suite_path.read_text()
        suite = parse_suite(text, args.suite or args.suite_path.stem, str(args.suite_path))
        baseline = load_baseline(args.baseline) if args.baseline is not None else None
    except (PodserveError, ValueError, OSError) as exc:
        print(f"podserve eval: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return EXIT_USAGE

    async def evaluate() -> RunResult:
        transport = HttpxTransport(args.url, timeout_s=args.timeout_s, headers=headers)
        try:
            return await run_suite(suite, transport, url=args.url, concurrency=args.concurrency)
        finally:
            await transport.aclose()

    result = asyncio.run(evaluate())
    if not result.reachable:
        # No answer at all: no metrics either, so the stale-run alert fires rather than a
        # pass ratio of zero that says the model is wrong when the endpoint is only down.
        reason = result.cases[0].reasons[0] if result.cases else "no cases"
        print(f"podserve eval: {args.url} is unreachable ({reason})", file=sys.stderr)
        return EXIT_UNREACHABLE
    comparison = (
        compare(result, baseline, max_drop=args.max_drop, strict_cases=args.strict_cases)
        if baseline is not None
        else None
    )
    sys.stdout.write(FORMATTERS[args.format](result, comparison))
    code, problems = _verdict(args, result, comparison)
    for problem in problems:
        print(f"podserve eval: {problem}", file=sys.stderr)
    if args.save_baseline is not None:
        save_baseline(result, args.save_baseline)
    failed_export = _export(args, result)
    if failed_export is not None:
        print(f"podserve eval: {failed_export}", file=sys.stderr)
        return code or EXIT_UNREACHABLE
    return code
