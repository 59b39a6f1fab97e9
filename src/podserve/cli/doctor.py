"""`podserve doctor`: explain why a serving pod is unhealthy."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="explain why a serving pod is unhealthy",
        description="Diagnose a failing serving pod from `kubectl get pod -o yaml`, `kubectl "
        "get events -o yaml` and its logs, given as files — or live, by pod name, through "
        "kubectl when it is on PATH. Prints each diagnosis with its evidence and the fix. "
        "Exit code 1 when a problem is found.",
    )
    parser.add_argument("pod_name", nargs="?", help="pod to inspect live with kubectl")
    parser.add_argument("-n", "--namespace", default="default", help="namespace (live mode)")
    parser.add_argument("--pod", type=Path, help="file with `kubectl get pod -o yaml` output")
    parser.add_argument("--events", type=Path, help="file with `kubectl get events -o yaml`")
    parser.add_argument("--logs", type=Path, help="file with the pod's logs")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from podserve.core.errors import PodserveError
    from podserve.kube.doctor import diagnose, inputs, report

    try:
        if args.pod is not None:
            dumps = inputs.dumps(
                args.pod.read_text(),
                args.events.read_text() if args.events else None,
                args.logs.read_text() if args.logs else None,
            )
        elif args.pod_name:
            if not inputs.kubectl_available():
                print(
                    "podserve doctor: kubectl is not on PATH; pass --pod/--events/--logs "
                    "files instead",
                    file=sys.stderr,
                )
                return 2
            dumps = inputs.live_dump(args.pod_name, args.namespace)
        else:
            print("podserve doctor: give a pod name (live) or --pod FILE", file=sys.stderr)
            return 2
    except (OSError, PodserveError) as exc:
        print(f"podserve doctor: {exc}", file=sys.stderr)
        return 2
    results = [(dump, diagnose(dump)) for dump in dumps]
    out = report.to_json if args.format == "json" else report.to_text
    sys.stdout.write(out(results))
    return 1 if any(found for _, found in results) else 0
