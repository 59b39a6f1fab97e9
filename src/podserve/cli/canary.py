"""`podserve canary promote|rollback|set`: move traffic between stable and canary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "canary",
        help="rewrite canary weights in rendered output, an HTTPRoute or a ModelService",
        description="Rewrite the stable/canary weights of HTTPRoutes (and the percent of "
        "ModelService specs, including the copy podserve render stores in its ConfigMap) in "
        "a file or stdin. promote sends 100%% to the canary, rollback 0%%, set --percent N. "
        "Writes to stdout, or back to the file with --in-place.",
    )
    parser.add_argument("action", choices=["promote", "rollback", "set"])
    parser.add_argument("file", help="YAML file (rendered output, HTTPRoute, spec) or -")
    parser.add_argument("--percent", type=int, help="canary share for `set` (0-100)")
    parser.add_argument("-i", "--in-place", action="store_true", help="rewrite the file")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from podserve.core.errors import PodserveError
    from podserve.kube.canary import set_percent
    from podserve.kube.yamlio import dump_all, parse_documents

    if args.action == "set" and args.percent is None:
        print("podserve canary: set needs --percent N", file=sys.stderr)
        return 2
    if args.action != "set" and args.percent is not None:
        print(f"podserve canary: {args.action} takes no --percent", file=sys.stderr)
        return 2
    if args.in_place and args.file == "-":
        print("podserve canary: --in-place needs a file", file=sys.stderr)
        return 2
    percent = {"promote": 100, "rollback": 0}.get(args.action, args.percent)
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        manifests = [d.manifest for d in parse_documents(text, args.file)]
        updated, changes = set_percent(manifests, percent)
    except (OSError, PodserveError) as exc:
        print(f"podserve canary: {exc}", file=sys.stderr)
        return 2
    output = dump_all(updated)
    if args.in_place:
        Path(args.file).write_text(output)
    else:
        sys.stdout.write(output)
    for change in changes:
        print(f"{change.object}: canary {change.before}% -> {change.after}%", file=sys.stderr)
    return 0
