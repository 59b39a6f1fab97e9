"""`podserve batch`: score a JSONL file offline through a model (a Kubernetes Job).

Each input line is `{"id": ..., "inputs": {"<input>": <one row>}}` or an OIP-v2 request
body on one line; each output line is `{"id", "line", "outputs"}` or `{"id", "line",
"error"}`, in input order. Progress is checkpointed beside the output after every chunk,
so running the same command again (a restarted pod) resumes where the last run
committed, without scoring or writing any line twice. See docs/batch.md.

Exit codes:

    0  the whole input was scored (lines with errors are counted, not fatal)
    1  fatal: the model or input cannot be loaded, the checkpoint belongs to another job,
       an I/O error
    2  usage: bad arguments
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_USAGE = 2

DEFAULT_CACHE_DIR = "/cache"


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "batch",
        help="score a JSONL file offline, resumably (a Kubernetes Job)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument(
        "--model-dir", type=Path, metavar="DIR", help="a model directory with model.yaml"
    )
    model.add_argument(
        "--model",
        metavar="URI",
        help="a model URI (path, file://, http(s)://, s3://, hf://) fetched into the cache",
    )
    parser.add_argument(
        "--digest", metavar="sha256:HEX", default=None, help="pin the --model URI's digest"
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("PODSERVE_CACHE_DIR", DEFAULT_CACHE_DIR)),
        help="cache for fetched models and inputs (env PODSERVE_CACHE_DIR, default /cache)",
    )
    parser.add_argument(
        "--input", required=True, metavar="IN", help="JSONL input: a path or any model URI"
    )
    parser.add_argument(
        "--output", required=True, type=Path, metavar="OUT", help="JSONL output file (local)"
    )
    parser.add_argument(
        "--batch-size",
        type=_positive_int,
        default=64,
        help="rows per model call (default 64)",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        metavar="PATH",
        help="progress file (default OUT.checkpoint)",
    )
    parser.add_argument(
        "--progress",
        choices=("auto", "rich", "json", "none"),
        default="auto",
        help="progress on stderr: auto = a bar on a terminal unless PODSERVE_LOG_FORMAT=json, "
        "JSON log lines otherwise; "
        "none = the summary only",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="ignore any checkpoint and overwrite the output: start from the first line",
    )
    parser.set_defaults(run=_run)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _run(args: argparse.Namespace) -> int:
    from podserve.batchjob import (
        JobSpec,
        fetch_model_dir,
        load_model,
        local_input,
        reporter_for,
        run_job,
    )
    from podserve.batchjob.progress import JsonLinesReporter, RichReporter
    from podserve.core.errors import PodserveError
    from podserve.storage.progress import json_log_line

    if args.digest is not None and args.model is None:
        sys.stderr.write("podserve batch: --digest pins --model; it needs --model URI\n")
        return EXIT_USAGE
    checkpoint = args.checkpoint or args.output.with_name(args.output.name + ".checkpoint")
    log_format = os.environ.get("PODSERVE_LOG_FORMAT")
    reporter = reporter_for(args.progress, log_format=log_format)
    if not isinstance(reporter, RichReporter):
        from podserve.obs.logging import quiet_third_party_progress

        quiet_third_party_progress()  # a model's library must not draw bars into JSON lines
    as_json = isinstance(reporter, JsonLinesReporter) or log_format == "json"

    def say(message: str, level: str) -> None:
        if as_json:
            sys.stderr.write(
                json_log_line("podserve.batch", message, {"event": level}, level=level)
            )
        else:
            sys.stderr.write(f"podserve batch: {message}\n")

    try:
        model_path = args.model_dir
        if args.model is not None:
            model_path = fetch_model_dir(args.model, digest=args.digest, cache_dir=args.cache_dir)
        loaded = load_model(model_path)
        input_path = local_input(args.input, cache_dir=args.cache_dir)
        spec = JobSpec(
            input_path=input_path,
            input_name=args.input,
            output_path=args.output,
            checkpoint_path=checkpoint,
            batch_size=args.batch_size,
            restart=args.restart,
        )
        summary = run_job(
            spec,
            model=loaded.model,
            model_name=loaded.config.name,
            reporter=reporter,
        )
    except PodserveError as exc:
        say(exc.message, "error")
        return EXIT_FATAL
    except OSError as exc:
        say(str(exc), "error")
        return EXIT_FATAL
    if summary.total_errors:
        say(
            f"{summary.total_errors:,} line(s) had errors; see the 'error' lines in {args.output}",
            "warning",
        )
    return EXIT_OK
