"""`podserve serve`: every ServerSettings field is a flag, documented from its description."""

from __future__ import annotations

import argparse
import os
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo

from podserve.config.settings import DEFAULT_SETTINGS_FILE, ServerSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the model server",
        description="Run the model server. Every flag is also a PODSERVE_<NAME> environment "
        "variable and a key of the settings file; precedence: flags > environment > "
        "settings file > defaults.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,
        help="YAML settings file "
        f"(env PODSERVE_CONFIG; default {DEFAULT_SETTINGS_FILE} if it exists)",
    )
    for name, field in ServerSettings.model_fields.items():
        flag = "--" + ("model" if name == "models" else name.replace("_", "-"))
        env = f"PODSERVE_{name.upper()}"
        # argparse %-formats help strings: a literal % in a description must be doubled
        description = (field.description or "").replace("%", "%%")
        help_text = f"{description} [env {env}; default {_default_text(field)}]"
        kind = _scalar_type(field.annotation)
        if name == "models":
            parser.add_argument(
                flag,
                dest=name,
                action="append",
                metavar="NAME=PATH[:runtime]",
                default=argparse.SUPPRESS,
                help=help_text,
            )
        elif kind is bool:
            parser.add_argument(
                flag,
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        else:
            parser.add_argument(
                flag, dest=name, default=argparse.SUPPRESS, help=help_text, metavar=name.upper()
            )
    parser.add_argument(
        "--mlflow-uri",
        default=argparse.SUPPRESS,
        help="MLflow tracking server for models:/ and runs:/ model URIs; sets "
        "MLFLOW_TRACKING_URI for this process (a token comes from MLFLOW_TRACKING_TOKEN)",
    )
    parser.set_defaults(run=_run)


def _default_text(field: FieldInfo) -> str:
    """The default as a user reads it. `field.default` is pydantic's `PydanticUndefined`
    sentinel for required fields and fields with a `default_factory`, which --help printed
    verbatim (issue 15)."""
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        # Our factories take no argument (`list`, `dict`); a validated-data factory would
        # need the other fields, which --help does not have.
        return repr(field.get_default(call_default_factory=True, validated_data={}))
    return repr(field.default)


def _scalar_type(annotation: Any) -> Any:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if args else None
    return annotation


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    flags = {
        name: getattr(args, name) for name in ServerSettings.model_fields if hasattr(args, name)
    }
    config = getattr(args, "config", None) or os.environ.get("PODSERVE_CONFIG")
    path = (
        Path(config)
        if config
        else (DEFAULT_SETTINGS_FILE if DEFAULT_SETTINGS_FILE.is_file() else None)
    )
    if path is not None and not path.is_file():
        raise SystemExit(f"podserve serve: settings file {path} does not exist")
    return ServerSettings.build(flags, path)


def _run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from podserve.core.errors import PodserveError
    from podserve.obs.logging import configure_logging, flush_logging

    try:
        settings = settings_from_args(args)
    except ValidationError as exc:
        print(f"podserve serve: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    if mlflow_uri := getattr(args, "mlflow_uri", None):
        os.environ["MLFLOW_TRACKING_URI"] = mlflow_uri  # read by storage's MLflow fetcher
    configure_logging(settings.log_format, settings.log_level)
    sys.setswitchinterval(settings.gil_switch_interval_ms / 1000)
    from podserve.server.exit import exit_process, run_server_loop
    from podserve.server.runner import CannotListen, serve

    try:
        # uvloop when installed; returns without joining threads (server/exit.py)
        code = run_server_loop(serve(settings))
    except PodserveError as exc:
        print(f"podserve serve: {exc.message}", file=sys.stderr)
        return 2
    except CannotListen as exc:
        print(f"podserve serve: {exc}", file=sys.stderr)
        return 2
    finally:
        flush_logging()
    exit_process(code)
