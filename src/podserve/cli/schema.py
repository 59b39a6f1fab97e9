"""`podserve schema`: the ModelService JSON Schema, for editors and CI validation."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "schema",
        help="print the ModelService JSON Schema or its field reference",
        description="Print the JSON Schema of the ModelService spec (what "
        "schemas/modelservice.schema.json holds), or the Markdown field reference "
        "(docs/modelservice.md) with --format markdown.",
    )
    parser.add_argument("--format", choices=["json", "markdown"], default="json")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    import json

    from podserve.config.model_service import model_service_json_schema
    from podserve.kube.spec_docs import spec_markdown

    if args.format == "markdown":
        sys.stdout.write(spec_markdown())
    else:
        sys.stdout.write(json.dumps(model_service_json_schema(), indent=2, sort_keys=True) + "\n")
    return 0
