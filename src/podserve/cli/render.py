"""`podserve render SPEC`: a ModelService to Kubernetes manifests."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "render",
        help="render a ModelService spec into Kubernetes manifests",
        description="Render a ModelService spec (YAML) into every Kubernetes object it needs, "
        "in apply order: multi-document YAML on stdout, one file per object with -o DIR, or a "
        "kustomize base with --format kustomize. Warnings go to stderr.",
    )
    parser.add_argument("spec", help="ModelService YAML file, or - for stdin")
    parser.add_argument("-o", "--output", type=Path, help="write one file per object here")
    parser.add_argument(
        "--format",
        choices=["yaml", "kustomize"],
        default="yaml",
        help="kustomize: also write kustomization.yaml (needs -o)",
    )
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from podserve.config.model_service import load_model_service
    from podserve.core.errors import PodserveError
    from podserve.kube.render import render
    from podserve.kube.render.output import write_files, write_kustomize
    from podserve.kube.yamlio import dump_all

    try:
        text = sys.stdin.read() if args.spec == "-" else Path(args.spec).read_text()
        if _is_gateway(text):
            return _render_gateway(text, args)
        service = load_model_service(text, args.spec)
    except (OSError, PodserveError) as exc:
        print(f"podserve render: {exc}", file=sys.stderr)
        return 2
    rendering = render(service)
    for warning in rendering.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    # Self-check: what the API server, KEDA's webhook and the CRDs' CEL rules would say.
    from podserve.kube.apiserver import self_check

    problems = self_check(rendering.manifests)
    for problem in problems:
        print(f"{problem.severity.value}: {problem}", file=sys.stderr)
    if any(p.severity.value == "error" for p in problems):
        print("podserve render: the cluster would reject this output", file=sys.stderr)
        return 1
    if args.format == "kustomize" and args.output is None:
        print("podserve render: --format kustomize needs -o DIR", file=sys.stderr)
        return 2
    if args.output is None:
        sys.stdout.write(dump_all(rendering.manifests))
        return 0
    if args.format == "kustomize":
        written = write_kustomize(rendering.manifests, args.output, service.metadata.namespace)
    else:
        written = write_files(rendering.manifests, args.output)
    print(f"wrote {len(written)} file(s) to {args.output}", file=sys.stderr)
    return 0


def _is_gateway(text: str) -> bool:
    from podserve.config.gateway_spec import spec_kind

    return spec_kind(text) == "Gateway"


def _render_gateway(text: str, args: argparse.Namespace) -> int:
    """`kind: Gateway` (docs/gateway.md): the gateway's Deployment and its companions."""
    from podserve.config.gateway_spec import load_gateway_spec
    from podserve.kube.render.gateway import render_gateway
    from podserve.kube.render.output import write_files, write_kustomize
    from podserve.kube.yamlio import dump_all

    spec = load_gateway_spec(text, args.spec)
    manifests = render_gateway(spec)
    if args.format == "kustomize" and args.output is None:
        print("podserve render: --format kustomize needs -o DIR", file=sys.stderr)
        return 2
    if args.output is None:
        sys.stdout.write(dump_all(manifests))
        return 0
    if args.format == "kustomize":
        written = write_kustomize(manifests, args.output, spec.metadata.namespace)
    else:
        written = write_files(manifests, args.output)
    print(f"wrote {len(written)} file(s) to {args.output}", file=sys.stderr)
    return 0
