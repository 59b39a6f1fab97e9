"""The value types, checks and bounds of the gateway's config (gateway_config.py): URLs
checked at load, strict numbers, camelCase sections, and the bounds that keep every hold
an exact integer in both stores."""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Strict
from pydantic.alias_generators import to_camel

NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


def _http_url(url: str) -> str:
    """An upstream's URL, checked here so a typo fails at load, not as every request's 503."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 (parses the port, raising on a bad one)
    except ValueError as exc:
        raise ValueError(f"{url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http:// or https:// URL with a host")
    return url


def _pod_url(url: str) -> str:
    """A pod's base URL: the gateway appends the request's own path (`/v1/...`, `/v2/...`),
    so a path here (`http://pod:8000/v1`) made every request's URL wrong: all 503s."""
    parts = urlsplit(_http_url(url))
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(
            f"{url!r}: a pod endpoint is scheme://host:port only (the request's path, "
            "e.g. /v1/completions, is appended to it); drop the path, query or fragment"
        )
    return url


def _distinct(names: list[str]) -> list[str]:
    # The router adds an upstream once per listing: [m, m] doubled a pool's share of m.
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"lists a model more than once: {', '.join(twice)}")
    return names


HttpUrl = Annotated[str, AfterValidator(_http_url)]
PodUrl = Annotated[str, AfterValidator(_pod_url)]
Models = Annotated[list[str], AfterValidator(_distinct)]
# Numbers and switches are taken only as written: lax parsing read `storeTimeoutMs: true`
# as 1 and `"40"` as 40. An int is still accepted where a float is expected.
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]
Bool = Annotated[bool, Strict()]


class Section(BaseModel):
    # camelCase keys only (no populate_by_name): `max_body_bytes` beside the documented
    # `maxBodyBytes` was accepted, so one file had two spellings of a key.
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, frozen=True)


# The output cap the gateway reserves for and forwards at most (gateway/wire.py). No model
# generates this many tokens in one response (the largest output limits today are ~128k
# tokens), so a larger `max_tokens` (some clients send 2**31 - 1 for "no limit") is
# forwarded as this. It keeps every hold an exact integer in the stores: SQLite's INTEGER
# is 64-bit and Redis scripts compute in doubles (exact below 2**53); before this bound,
# `n` of 10**19 or `max_tokens` of 2**62 made SQLite raise OverflowError (a 500).
MAX_OUTPUT_TOKENS = 1 << 20

# Far above any model's list price (the dearest output tokens today are hundreds of USD a
# million), and low enough that the largest hold the gateway makes (16 MiB of prompt and
# 128 choices of 2**20 tokens) stays below 2**53 nano-dollars: exact in the Redis scripts'
# doubles and in SQLite's 64-bit integers.
MAX_PRICE_PER_MILLION_USD = 10_000

# A budget past a billion USD is a typo, and one past 2**53 micro-dollars (9e9 USD) is not
# exact in the Redis scripts' doubles; `--budget-usd 1e30` made SQLite raise OverflowError.
MAX_BUDGET_USD = 1_000_000_000

# The most requests or tokens a minute a team, namespace or key may be limited to: far above
# any real limit, and inside every store's integers (`--rpm 1e20` made SQLite raise
# OverflowError past 2**63).
MAX_RATE_PER_MINUTE = 2**31 - 1

# Team and namespace names become parts of budget and limit scope names: `team:<name>`,
# and `team:<name>@<period>` for a periodic budget, so a team named `search@2026-12` shared
# team `search`'s December budget; `{`/`}` would pick a Redis Cluster hash slot.
_SCOPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def scope_name_error(kind: str, name: str) -> str | None:
    """Why `name` cannot name a team or namespace, or None when it can."""
    if _SCOPE_NAME.fullmatch(name):
        return None
    return (
        f"{kind} name {name[:64]!r} must be 1-128 letters, digits, '.', '_' or '-', "
        "starting with a letter or digit"
    )
