"""`podserve fetch URI`: put a verified model in the node cache (the init container).

Prints the local path on stdout; progress goes to stderr (a bar on a terminal, JSON log
lines otherwise, and always with PODSERVE_LOG_FORMAT=json). Exit codes, so that a Pod's
status says what failed without reading logs:

    0  fetched (or already cached) and verified
    1  any other failure (access denied, corrupt cache, missing extra, ...)
    2  usage: bad arguments, malformed URI or digest, unsupported scheme
    3  the model is not at the source
    4  digest mismatch: the bytes are not the pinned model
    5  network error: the source was unreachable or the transfer broke (retry resumes)
    6  archive refused: unsafe (a path or link outside the model, a device file), over a
       bound (--max-unpacked-bytes, --max-unpacked-files, the packed/unpacked ratio), or
       not a readable archive

An http(s) URI ending in .tar, .tar.gz, .tgz, .tar.bz2, .tar.xz or .zip is unpacked (as
KServe's storage initializer does) and the digest covers the unpacked tree: pin the
`podserve digest` of the directory you packed, not the archive's sha256.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from podserve.storage.archive import ArchiveLimits

EXIT_OK = 0
EXIT_OTHER = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_DIGEST_MISMATCH = 4
EXIT_NETWORK = 5
EXIT_ARCHIVE = 6

DEFAULT_CACHE_DIR = "/cache"


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "fetch",
        help="download and verify a model into the node cache",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "uri",
        metavar="URI",
        help="path, file://, http(s)://, s3://bucket/key, gs://bucket/key, "
        "https://<account>.blob.core.windows.net/<container>/<path>, hf://org/name@rev, "
        "models:/name/version, models:/name@alias or runs:/run_id/path (MLflow); "
        "a trailing @sha256:<hex> pins the digest",
    )
    parser.add_argument(
        "--digest",
        metavar="sha256:HEX",
        default=None,
        help="pin the model's digest (see `podserve digest`)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("PODSERVE_CACHE_DIR", DEFAULT_CACHE_DIR)),
        help="node cache directory (env PODSERVE_CACHE_DIR, default /cache)",
    )
    parser.add_argument(
        "--cache-max-bytes",
        type=int,
        default=None,
        help="evict least-recently-used entries not in use above this size "
        "(env PODSERVE_CACHE_MAX_BYTES; default: unbounded)",
    )
    parser.add_argument(
        "--s3-endpoint-url",
        default=os.environ.get("PODSERVE_S3_ENDPOINT_URL"),
        help="S3-compatible endpoint (env PODSERVE_S3_ENDPOINT_URL; "
        "default: boto3's own, e.g. AWS_ENDPOINT_URL)",
    )
    parser.add_argument(
        "--gcs-endpoint-url",
        default=os.environ.get("PODSERVE_GCS_ENDPOINT_URL"),
        help="Cloud Storage endpoint for gs:// (env PODSERVE_GCS_ENDPOINT_URL; default: "
        "STORAGE_EMULATOR_HOST, else storage.googleapis.com)",
    )
    parser.add_argument(
        "--gcs-anonymous",
        action="store_true",
        default=os.environ.get("PODSERVE_GCS_ANONYMOUS", "").lower() in ("1", "true"),
        help="read gs:// without credentials, for a public bucket (env PODSERVE_GCS_ANONYMOUS)",
    )
    parser.add_argument(
        "--azure-blob-endpoint",
        default=os.environ.get("PODSERVE_AZURE_BLOB_ENDPOINT"),
        help="account URL to use for Azure Blob URIs instead of https://<account>.blob.core."
        "windows.net, e.g. Azurite's (env PODSERVE_AZURE_BLOB_ENDPOINT; a connection string's "
        "own endpoint wins)",
    )
    parser.add_argument(
        "--mlflow-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI"),
        help="MLflow tracking server for models:/ and runs:/ URIs (env MLFLOW_TRACKING_URI; "
        "a bearer token from MLFLOW_TRACKING_TOKEN)",
    )
    parser.add_argument(
        "--hf-cache-dir",
        type=Path,
        default=None,
        help="Hugging Face cache to download into or read a mirror from",
    )
    parser.add_argument(
        "--hf-offline",
        action="store_true",
        help="never contact the hub: hf:// models must be in --hf-cache-dir",
    )
    parser.add_argument(
        "--copy-local",
        action="store_true",
        help="copy a local path into the cache instead of serving it in place",
    )
    parser.add_argument(
        "--verify-hit",
        action="store_true",
        help="re-hash a pinned cache hit against its digest before using it (for a node "
        "cache other pods can write to, e.g. a hostPath)",
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=60.0,
        help="network timeout per connect or read, in seconds",
    )
    parser.add_argument(
        "--max-unpacked-bytes",
        type=_positive_int,
        default=None,
        help="bound on the bytes an archive may unpack to (default 256 GiB; an archive may "
        "also unpack to at most 200x its size above 64 MiB)",
    )
    parser.add_argument(
        "--max-unpacked-files",
        type=_positive_int,
        default=None,
        help="bound on the entries of an archive (default 100000)",
    )
    parser.add_argument(
        "--progress",
        choices=("auto", "rich", "json", "none"),
        default="auto",
        help="progress on stderr: auto = a bar on a terminal unless PODSERVE_LOG_FORMAT=json, "
        "JSON log lines otherwise",
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


def _env_int(name: str) -> int | None:
    # Read at run time, not when the parser is built: a bad value must fail `fetch` with a
    # usage error, not every podserve subcommand. Raises ValueError on a non-integer.
    value = os.environ.get(name)
    return int(value) if value else None


def _run(args: argparse.Namespace) -> int:
    from podserve.storage import (
        DigestMismatch,
        FetchNetworkError,
        InvalidModelURI,
        ModelNotFoundAtSource,
        SourceOptions,
        StorageError,
        fetch_model,
        progress_for,
    )
    from podserve.storage.archive import ArchiveError, ArchiveLimits
    from podserve.storage.progress import JsonLinesProgress, RichProgress, json_log_line

    max_cache_bytes = args.cache_max_bytes
    if max_cache_bytes is None:
        try:
            max_cache_bytes = _env_int("PODSERVE_CACHE_MAX_BYTES")
        except ValueError:
            sys.stderr.write("podserve fetch: PODSERVE_CACHE_MAX_BYTES is not a whole number\n")
            return EXIT_USAGE
    log_format = os.environ.get("PODSERVE_LOG_FORMAT")
    progress = progress_for(args.progress, log_format=log_format)
    if not isinstance(progress, RichProgress):
        from podserve.obs.logging import quiet_third_party_progress

        quiet_third_party_progress()  # huggingface_hub's own bars would break the JSON lines
    sources = SourceOptions(
        s3_endpoint_url=args.s3_endpoint_url,
        gcs_endpoint_url=args.gcs_endpoint_url,
        gcs_anonymous=args.gcs_anonymous,
        azure_blob_endpoint=args.azure_blob_endpoint,
        hf_cache_dir=args.hf_cache_dir,
        hf_offline=args.hf_offline,
        timeout_s=args.timeout_s,
        mlflow_tracking_uri=args.mlflow_uri,
        mlflow_token=os.environ.get("MLFLOW_TRACKING_TOKEN"),
    )
    code = EXIT_OK
    fields: dict[str, object] = {}
    try:
        result = fetch_model(
            args.uri,
            digest=args.digest,
            cache_dir=args.cache_dir,
            progress=progress,
            sources=sources,
            copy_local=args.copy_local,
            max_cache_bytes=max_cache_bytes,
            archive_limits=_archive_limits(args, ArchiveLimits()),
            verify_hit=args.verify_hit,
        )
    except InvalidModelURI as exc:
        code, message = EXIT_USAGE, exc.message
    except ModelNotFoundAtSource as exc:
        code, message = EXIT_NOT_FOUND, exc.message
    except DigestMismatch as exc:
        code, message = EXIT_DIGEST_MISMATCH, exc.message
        fields = {"expected": exc.expected, "actual": exc.actual}
    except FetchNetworkError as exc:
        code, message = EXIT_NETWORK, exc.message
    except ArchiveError as exc:
        code, message = EXIT_ARCHIVE, exc.message
    except StorageError as exc:
        code, message = EXIT_OTHER, exc.message
    except OSError as exc:  # the cache volume itself: full, read-only, permissions
        code, message = EXIT_OTHER, f"cache error: {exc}"
    finally:
        progress.close()
    if code != EXIT_OK:
        if isinstance(progress, JsonLinesProgress) or log_format == "json":
            record = {"event": "error", "exit_code": code, "error": message, **fields}
            sys.stderr.write(json_log_line("podserve.fetch", message, record, level="error"))
        else:
            sys.stderr.write(f"podserve fetch: {message}\n")
        return code
    sys.stdout.write(f"{result.path}\n")
    return EXIT_OK


def _archive_limits(args: argparse.Namespace, defaults: ArchiveLimits) -> ArchiveLimits:
    return dataclasses.replace(
        defaults,
        max_unpacked_bytes=args.max_unpacked_bytes or defaults.max_unpacked_bytes,
        max_entries=args.max_unpacked_files or defaults.max_entries,
    )
