"""`podserve gateway`: the gateway server, and its `keys` and `spend` commands."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Coroutine
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from podserve.config.gateway_config import GatewayConfig
    from podserve.gateway.store.base import Store

T = TypeVar("T")
# BudgetPeriod's values, spelled here so that `--help` does not import the config module.
_PERIODS = ("lifetime", "daily", "weekly", "monthly")
# A key's lifetime at most: 1e308 days made its expiry infinite (never), and `keys list
# --format json` then printed `Infinity`, which is not JSON.
MAX_EXPIRES_IN_DAYS = 36_525


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "gateway",
        help="run the API gateway (keys, budgets, rate limits, routing), or manage it",
        description="Serve an OpenAI-compatible and OIP v2 gateway in front of podserve pods "
        "and hosted APIs (docs/gateway.md); `keys` and `spend` manage its store.",
    )
    _config_arg(parser, required=False)
    parser.add_argument("--host", default="0.0.0.0", help="listen address")
    parser.add_argument("--port", type=int, default=8080, help="listen port (0: any free)")
    parser.add_argument("--log-format", choices=["json", "console"], default="json")
    parser.set_defaults(run=_serve)
    sub = parser.add_subparsers(dest="gateway_command", metavar="COMMAND")

    keys = sub.add_parser("keys", help="create, list, rotate or revoke API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    create = keys_sub.add_parser("create", help="create a key (printed once, on the last line)")
    _config_arg(create)
    create.add_argument("--team", default="default", help="team the key belongs to")
    create.add_argument("--namespace", default="default", help="namespace it bills to")
    create.add_argument("--budget-usd", help="hard budget for this key, USD")
    create.add_argument(
        "--budget-period",
        default="lifetime",
        choices=_PERIODS,
        help="when the budget starts again: never (default), or every UTC day, ISO week or "
        "calendar month",
    )
    create.add_argument("--rpm", type=int, help="requests per minute")
    create.add_argument("--tpm", type=int, help="tokens per minute")
    create.add_argument("--models", help="comma-separated models it may use (default: all)")
    create.add_argument(
        "--expires-in-days",
        type=float,
        help=f"expire after this many days (more than 0, at most {MAX_EXPIRES_IN_DAYS})",
    )
    create.set_defaults(run=_keys_create)
    listing = keys_sub.add_parser("list", help="list keys (ids, never the keys)")
    _config_arg(listing)
    listing.add_argument("--format", choices=["text", "json"], default="text")
    listing.set_defaults(run=_keys_list)
    revoke = keys_sub.add_parser("revoke", help="revoke a key by its id")
    _config_arg(revoke)
    revoke.add_argument("key_id", help="the id `keys list` shows")
    revoke.set_defaults(run=_keys_revoke)
    rotate = keys_sub.add_parser(
        "rotate",
        help="give a key a new secret (printed once, on the last line), keeping its id, "
        "budget, spend and limits",
    )
    _config_arg(rotate)
    rotate.add_argument("key_id", help="the id `keys list` shows")
    rotate.add_argument(
        "--grace-s",
        type=float,
        default=0.0,
        help="seconds the old secret keeps working, while clients move to the new one "
        "(default 0: it stops at once; gateways that cached it stop within keyCacheS)",
    )
    rotate.set_defaults(run=_keys_rotate)

    spend = sub.add_parser("spend", help="spend from the ledger, grouped")
    _config_arg(spend)
    spend.add_argument("--by", choices=["key", "team", "namespace", "model"], required=True)
    spend.add_argument("--format", choices=["text", "json"], default="text")
    spend.add_argument(
        "--period",
        default="lifetime",
        choices=_PERIODS,
        help="only the current UTC period's spend: daily, weekly (ISO) or monthly, as "
        "periodic budgets count it (default lifetime: the whole ledger)",
    )
    spend.set_defaults(run=_spend)


def _config_arg(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        required=required,
        default=argparse.SUPPRESS if required else None,
        help="gateway.yaml",
    )


def _load(args: argparse.Namespace) -> GatewayConfig | None:
    from podserve.config.gateway_config import load_gateway_config
    from podserve.core.errors import PodserveError

    if args.config is None:
        print("podserve gateway: --config gateway.yaml is required", file=sys.stderr)
        return None
    try:
        return load_gateway_config(args.config.read_text(), str(args.config))
    except (OSError, PodserveError) as exc:
        print(f"podserve gateway: {exc}", file=sys.stderr)
        return None


def _problems(found: list[str]) -> bool:
    """Print each problem found before starting; whether there was any (then exit 2)."""
    for problem in found:
        print(f"podserve gateway: {problem}", file=sys.stderr)
    return bool(found)


def _with_store(config: GatewayConfig, work: Any) -> int:
    """Open the store, run `work(store)`, close it; a store setting that cannot work is
    exit code 2, a store error exit code 3."""
    from podserve.cli.gateway_checks import store_problems
    from podserve.gateway.errors import GatewayError
    from podserve.gateway.store.base import StoreUnavailable
    from podserve.gateway.stores import open_store

    if _problems(store_problems(config, os.environ)):
        return 2

    async def main() -> int:
        store = open_store(config, os.environ)
        try:
            setup = getattr(store, "setup", None)
            if setup is not None:
                await setup()
            result: int = await work(store)
            return result
        finally:
            await store.close()

    try:
        return _run(main())
    except (StoreUnavailable, GatewayError) as exc:
        print(f"podserve gateway: store: {exc}", file=sys.stderr)
        return 3


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def _serve(args: argparse.Namespace) -> int:
    from podserve.cli.gateway_checks import serving_problems
    from podserve.config.egress_proxy import ProxySettings
    from podserve.gateway.errors import GatewayError
    from podserve.gateway.runner import serve_gateway
    from podserve.gateway.store.base import StoreUnavailable
    from podserve.obs.logging import configure_logging

    config = _load(args)
    if config is None:
        return 2
    try:  # an egress proxy the client cannot use is refused now, not at the first request
        proxies = ProxySettings.from_env(os.environ)
    except ValueError as exc:
        print(f"podserve gateway: {exc}", file=sys.stderr)
        return 2
    # Only serving checks API keys and loads tokenizers: `keys` and `spend` need neither.
    if _problems(serving_problems(config, os.environ)):
        return 2
    configure_logging(args.log_format)
    serving = serve_gateway(config, args.host, args.port, os.environ, proxies)
    try:
        return _serve_loop(serving)
    except (StoreUnavailable, GatewayError) as exc:  # the store failed to open
        print(f"podserve gateway: store: {exc}", file=sys.stderr)
        return 2


def _serve_loop(serving: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop
    except ImportError:  # uvloop is optional; asyncio works, slower
        return _run(serving)
    return uvloop.run(serving)


def _keys_create(args: argparse.Namespace) -> int:
    import math
    import time

    from podserve.config.gateway_config import BudgetPeriod
    from podserve.config.gateway_fields import (
        MAX_BUDGET_USD,
        MAX_RATE_PER_MINUTE,
        scope_name_error,
    )
    from podserve.gateway.keys import KeyRecord, key_id_of, new_key
    from podserve.gateway.money import usd_to_micro

    config = _load(args)
    if config is None:
        return 2
    budget_micro = None
    if args.budget_usd is not None:
        try:
            budget = Decimal(args.budget_usd)
        except InvalidOperation:
            budget = Decimal(-1)
        if not budget.is_finite() or not 0 <= budget <= MAX_BUDGET_USD:
            print(
                f"podserve gateway keys: --budget-usd must be a number from 0 to {MAX_BUDGET_USD}",
                file=sys.stderr,
            )
            return 2
        budget_micro = usd_to_micro(budget)
    for kind, name in (("team", args.team), ("namespace", args.namespace)):
        error = scope_name_error(kind, name)
        if error is not None:
            print(f"podserve gateway keys: --{kind}: {error}", file=sys.stderr)
            return 2
    for flag in ("rpm", "tpm"):
        value = getattr(args, flag)
        if value is not None and not 1 <= value <= MAX_RATE_PER_MINUTE:
            # past 2**63 the store raised OverflowError (a traceback)
            print(
                f"podserve gateway keys: --{flag} must be from 1 to {MAX_RATE_PER_MINUTE}",
                file=sys.stderr,
            )
            return 2
    days = args.expires_in_days
    if days is not None and not (math.isfinite(days) and 0 < days <= MAX_EXPIRES_IN_DAYS):
        # nan made a key that never expired; 0 and less, one expired at birth
        print(
            "podserve gateway keys: --expires-in-days must be a number of days more than 0, "
            f"at most {MAX_EXPIRES_IN_DAYS}",
            file=sys.stderr,
        )
        return 2
    models = tuple(m.strip() for m in (args.models or "").split(",") if m.strip())
    if args.models is not None and not models:
        # An empty list means every model: a `--models ","` meant to restrict must not.
        print("podserve gateway keys: --models names no model", file=sys.stderr)
        return 2
    unknown = [m for m in models if m not in config.models()]
    if unknown:
        print(f"podserve gateway keys: unknown model(s) {', '.join(unknown)}", file=sys.stderr)
        return 2
    key, digest = new_key()
    now = time.time()
    expires = None if days is None else now + days * 86400
    record = KeyRecord(
        key_id=key_id_of(digest),
        key_hash=digest,
        team=args.team,
        namespace=args.namespace,
        models=models,
        budget_micro=budget_micro,
        rpm=args.rpm,
        tpm=args.tpm,
        expires_at=expires,
        revoked=False,
        created_at=now,
        budget_period=BudgetPeriod(args.budget_period),
    )

    async def work(store: Store) -> int:
        await store.create_key(record)
        print(
            f"created key {record.key_id} (team {record.team}, namespace "
            f"{record.namespace}); it is shown only once:"
        )
        print(key)
        return 0

    return _with_store(config, work)


def _keys_list(args: argparse.Namespace) -> int:
    import json
    import time

    from podserve.cli.gateway_keys_list import key_rows, key_table

    config = _load(args)
    if config is None:
        return 2

    async def work(store: Store) -> int:
        records = await store.list_keys()
        if args.format == "json":
            print(json.dumps(key_rows(records), indent=2))
            return 0
        print("\n".join(key_table(records, time.time())))
        return 0

    return _with_store(config, work)


def _keys_revoke(args: argparse.Namespace) -> int:
    config = _load(args)
    if config is None:
        return 2

    async def work(store: Store) -> int:
        if not await store.revoke_key(args.key_id):
            print(f"podserve gateway keys: no key with id {args.key_id}", file=sys.stderr)
            return 1
        print(f"revoked key {args.key_id}")
        return 0

    return _with_store(config, work)


def _keys_rotate(args: argparse.Namespace) -> int:
    import math
    import time

    from podserve.gateway.keys import new_key

    config = _load(args)
    if config is None:
        return 2
    if not math.isfinite(args.grace_s) or args.grace_s < 0:
        print("podserve gateway keys: --grace-s must be a number >= 0", file=sys.stderr)
        return 2
    key, digest = new_key()
    # The old secret is kept even without a grace (until now): refused, it then says
    # "expired", as docs/gateway.md promises, not "invalid API key".
    until = time.time() + args.grace_s

    async def work(store: Store) -> int:
        if not await store.rotate_key(args.key_id, digest, until):
            print(f"podserve gateway keys: no active key with id {args.key_id}", file=sys.stderr)
            return 1
        old = f"keeps working for {args.grace_s:g} s" if args.grace_s > 0 else "no longer works"
        print(f"rotated key {args.key_id}; the old secret {old}. The new key is shown once:")
        print(key)
        return 0

    return _with_store(config, work)


def _spend(args: argparse.Namespace) -> int:
    import json
    import time

    from podserve.config.gateway_config import BudgetPeriod
    from podserve.gateway.money import micro_to_usd
    from podserve.gateway.periods import span_at
    from podserve.gateway.store.base import Dimension

    config = _load(args)
    if config is None:
        return 2
    by = Dimension(args.by)
    span = span_at(BudgetPeriod(args.period), time.time())

    async def work(store: Store) -> int:
        rows = await store.spend(by, None if span is None else span.start_s)
        out = [
            {
                by.value: r.group,
                "spend_usd": micro_to_usd(r.cost_micro),
                "prompt_tokens": r.prompt_tokens,
                "completion_tokens": r.completion_tokens,
                "requests": r.requests,
            }
            for r in rows
        ]
        if args.format == "json":
            print(json.dumps(out, indent=2))
            return 0
        print(
            f"{by.value.upper():<24}{'SPEND USD':>14}{'PROMPT':>12}{'COMPLETION':>12}"
            f"{'REQUESTS':>10}"
        )
        for row in out:
            print(
                f"{row[by.value]:<24}{row['spend_usd']:>14.6f}{row['prompt_tokens']:>12}"
                f"{row['completion_tokens']:>12}{row['requests']:>10}"
            )
        return 0

    return _with_store(config, work)
