"""`podserve consume`: run inference requests from a Redis stream, write results to another.

Each request is one stream entry with the fields `id`, `model`, `body` (an OIP v2
inference request as JSON) and optionally `api` (`openai.embeddings`, `openai.completions`
or `openai.chat` for an OpenAI body); each result is one entry on the results stream
with `id`, `status` and `body`. See docs/async.md for the contract, delivery guarantees
and a producer example.

Models and their limits are given as to `podserve serve` (`--model`, `--model-repository`,
and every PODSERVE_* variable). The Redis password may come from a file
(`--redis-password-file`: the rendered Deployment mounts it from a Secret) or REDIS_PASSWORD
instead of the URL.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "consume",
        help="run inference requests from a Redis stream",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    env = os.environ.get
    parser.add_argument(
        "--redis",
        default=env("PODSERVE_REDIS_URL"),
        help="redis://host:port/db (env PODSERVE_REDIS_URL)",
    )
    parser.add_argument(
        "--redis-password-file",
        type=Path,
        default=env("PODSERVE_REDIS_PASSWORD_FILE"),
        help="a file holding the Redis password (a mounted Secret; env "
        "PODSERVE_REDIS_PASSWORD_FILE); else REDIS_PASSWORD, else the URL's",
    )
    parser.add_argument("--stream", required=True, help="the request stream")
    parser.add_argument("--group", required=True, help="the consumer group (created if missing)")
    parser.add_argument("--results-stream", required=True, help="where results are written")
    parser.add_argument(
        "--dead-letter-stream",
        default=None,
        help="where entries that failed --max-failures times go (default: <stream>:dead)",
    )
    parser.add_argument(
        "--consumer",
        default=None,
        help="this consumer's name in the group (default: <hostname>-<pid>, unique per process)",
    )
    parser.add_argument(
        "--model",
        dest="models",
        action="append",
        default=[],
        metavar="NAME=URI[:runtime]",
        help="a model to serve (repeatable)",
    )
    parser.add_argument(
        "--model-repository", type=Path, default=None, help="a model repository directory"
    )
    parser.add_argument(
        "--max-failures",
        type=int,
        default=3,
        help="failed attempts before an entry is dead-lettered (0: never; retried for ever)",
    )
    parser.add_argument(
        "--claim-idle-ms",
        type=int,
        default=30_000,
        help="claim entries another consumer left pending this long (XAUTOCLAIM)",
    )
    parser.add_argument(
        "--block-ms",
        type=int,
        default=1000,
        help="longest wait of one read; also the longest reaction to SIGTERM",
    )
    parser.add_argument(
        "--read-count",
        type=int,
        default=None,
        help="entries per read (default: the models' largest batch)",
    )
    parser.add_argument(
        "--max-inflight",
        type=int,
        default=None,
        help="entries processed at once (default: twice --read-count)",
    )
    parser.add_argument(
        "--drain-timeout-s",
        type=float,
        default=float(env("PODSERVE_DRAIN_TIMEOUT_S", "25")),
        help="after SIGTERM, how long claimed entries may take to finish",
    )
    parser.add_argument(
        "--metrics-port", type=int, default=9100, help="Prometheus /metrics port (0: any free port)"
    )
    parser.add_argument("--metrics-host", default="0.0.0.0", help="metrics listen address")
    parser.add_argument(
        "--results-ttl-s",
        "--result-ttl-s",
        dest="results_ttl_s",
        type=int,
        default=24 * 3600,
        help="results older than this are trimmed from the results stream (exact MINID), "
        "and a request id's answered-marker lives as long: a repeated id within it gets "
        "no second result (default: 1 day)",
    )
    parser.add_argument(
        "--results-maxlen",
        type=int,
        default=1_000_000,
        help="cap on the results stream's length (XTRIM MAXLEN ~, whole nodes; 0: no cap)",
    )
    acked = parser.add_mutually_exclusive_group()
    acked.add_argument(
        "--delete-acknowledged",
        dest="delete_acknowledged",
        action="store_true",
        default=True,
        help="XDEL request entries once answered and acknowledged (default): right when this "
        "group is the stream's only reader (a work queue); skipped while another group exists",
    )
    acked.add_argument(
        "--keep-acknowledged",
        dest="delete_acknowledged",
        action="store_false",
        help="leave acknowledged entries in the request stream (other readers need them; "
        "trim it yourself)",
    )
    parser.add_argument(
        "--dead-letter-maxlen",
        type=int,
        default=100_000,
        help="cap on the dead-letter stream's length (XADD MAXLEN ~, whole nodes; 0: no cap)",
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="model cache (env PODSERVE_CACHE_DIR)"
    )
    parser.add_argument(
        "--mlflow-uri", default=None, help="MLflow tracking server for models:/ and runs:/ URIs"
    )
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    import asyncio

    from pydantic import ValidationError
    from redis.exceptions import RedisError

    from podserve.config.settings import ServerSettings
    from podserve.consume.consumer import ConsumerPolicy
    from podserve.consume.retention import Retention
    from podserve.consume.runner import ConsumeSettings, consume
    from podserve.consume.streams import StreamNames
    from podserve.core.errors import PodserveError
    from podserve.obs.logging import configure_logging, flush_logging

    if not args.redis:
        print("podserve consume: --redis (or PODSERVE_REDIS_URL) is required", file=sys.stderr)
        return 2
    if not args.models and args.model_repository is None:
        print("podserve consume: give --model or --model-repository", file=sys.stderr)
        return 2
    if args.mlflow_uri:
        os.environ["MLFLOW_TRACKING_URI"] = args.mlflow_uri  # read by storage's MLflow fetcher
    flags: dict[str, Any] = {"models": args.models}
    if args.model_repository is not None:
        flags["model_repository"] = args.model_repository
    if args.cache_dir is not None:
        flags["cache_dir"] = args.cache_dir
    try:
        server = ServerSettings.build(flags, None)
        policy = ConsumerPolicy(
            read_count=args.read_count or 8,
            max_inflight=args.max_inflight or 2 * (args.read_count or 8),
            block_ms=args.block_ms,
            claim_idle_ms=args.claim_idle_ms,
            max_failures=args.max_failures,
        )
        retention = Retention(
            ttl_s=args.results_ttl_s,
            maxlen=args.results_maxlen,
            delete_acknowledged=args.delete_acknowledged,
            dead_letter_maxlen=args.dead_letter_maxlen,
        )
    except (ValidationError, ValueError) as exc:
        print(f"podserve consume: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    password = os.environ.get("REDIS_PASSWORD") or None
    if args.redis_password_file is not None:
        try:
            # A Secret's file may end in a newline; a password never does.
            password = Path(args.redis_password_file).read_text().rstrip("\r\n") or None
        except OSError as exc:
            print(f"podserve consume: --redis-password-file: {exc}", file=sys.stderr)
            return 2
    names = StreamNames(
        requests=args.stream,
        group=args.group,
        results=args.results_stream,
        dead_letters=args.dead_letter_stream or f"{args.stream}:dead",
        consumer=args.consumer or f"{socket.gethostname()}-{os.getpid()}",
        retention=retention,
    )
    settings = ConsumeSettings(
        redis_url=args.redis,
        names=names,
        policy=policy,
        server=server,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
        drain_timeout_s=args.drain_timeout_s,
        redis_password=password,
        size_from_models=args.read_count is None and args.max_inflight is None,
    )
    configure_logging(server.log_format, server.log_level)
    try:
        return asyncio.run(consume(settings))
    except PodserveError as exc:
        print(f"podserve consume: {exc.message}", file=sys.stderr)
        return 2
    except (OSError, RedisError) as exc:  # Redis unreachable at start, metrics port taken
        print(f"podserve consume: {exc}", file=sys.stderr)
        return 2
    finally:
        flush_logging()
