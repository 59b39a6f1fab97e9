"""`podserve lint PATH...`: model-serving pitfalls in Kubernetes manifests."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "lint",
        help="find model-serving pitfalls in Kubernetes manifests",
        description="Lint manifests (files, directories, or - for stdin): podserve output, "
        "Helm output, hand-written YAML, KServe InferenceServices, KEDA ScaledObjects. Exit "
        "code 1 when any error is found. Rules: docs/lint-rules.md or --list-rules.",
    )
    parser.add_argument("paths", nargs="*", help="files or directories; - reads stdin")
    parser.add_argument(
        "--format",
        choices=["text", "json", "sarif", "markdown"],
        default="text",
        help="output format (markdown: with --list-rules)",
    )
    parser.add_argument(
        "--ignore", action="append", default=[], metavar="RULE", help="skip a rule (repeatable)"
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="also validate every object against the Kubernetes schemas of several minors "
        "(custom resources against their CRDs), the API server's cross-field checks and the "
        "CRDs' CEL rules; warnings fail too (exit 1)",
    )
    parser.add_argument(
        "--crd-dir",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="with --strict: more CRDs (*.yaml) beside the bundled ones (repeatable)",
    )
    parser.add_argument("--list-rules", action="store_true", help="print the rules and exit")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    import podserve
    from podserve.core.errors import PodserveError
    from podserve.kube.lint import ALL_RULES, LintResult, lint_documents, report, rule_by_id
    from podserve.kube.lint.strict import STRICT_RULES, strict_findings
    from podserve.kube.validation import CrdCatalog
    from podserve.kube.yamlio import read_paths

    if args.list_rules:
        out = report.rules_markdown if args.format == "markdown" else report.rules_text
        sys.stdout.write(out(ALL_RULES))
        return 0
    strict_ids = {rule.id for rule in STRICT_RULES}
    unknown = [r for r in args.ignore if rule_by_id(r) is None and r not in strict_ids]
    if unknown:
        print(f"podserve lint: unknown rule(s) {', '.join(unknown)}", file=sys.stderr)
        return 2
    if not args.paths:
        print("podserve lint: give files, directories or - (stdin)", file=sys.stderr)
        return 2
    try:
        documents = read_paths(args.paths)
    except PodserveError as exc:
        print(f"podserve lint: {exc}", file=sys.stderr)
        return 2
    result = lint_documents(documents, ALL_RULES, ignore=args.ignore)
    rules = ALL_RULES
    if args.strict:
        try:
            catalog = CrdCatalog.bundled(args.crd_dir)
        except PodserveError as exc:
            print(f"podserve lint: {exc}", file=sys.stderr)
            return 2
        extra = strict_findings(documents, catalog, ignore=args.ignore)
        result = LintResult(tuple(extra) + result.findings, result.documents)
        rules = (*STRICT_RULES, *ALL_RULES)
    if args.format == "json":
        sys.stdout.write(report.to_json(result))
    elif args.format == "sarif":
        sys.stdout.write(report.to_sarif(result, rules, podserve.__version__))
    else:
        sys.stdout.write(report.to_text(result))
    failed = result.errors > 0 or (args.strict and result.warnings > 0)
    return 1 if failed else 0
