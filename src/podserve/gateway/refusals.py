"""Requests that can never be admitted, refused as the client's error (400) before any
store call, and the words of the store's refusals (429).

A 429 says "later": its `Retry-After` sends the client back, for ever, with a request
that no wait could admit. Two such requests are known before the store is asked, from
the request and the limits alone: one whose least charge to a tpm window is over the
window's whole limit, and one whose least hold is over a budget's whole limit (a probe:
`max_tokens: 1e9` on an unspent 1 USD key got 429 "budget exhausted" with Retry-After
3600). "Least" is the plan's: `max_tokens` as asked in `reject` mode; with
`onBudgetShort: clamp`, one output token a choice, so clamp still lowers what it can.
"""

from __future__ import annotations

from collections.abc import Iterable

from podserve.gateway.budget import HoldPlan, Refusal
from podserve.gateway.errors import InvalidRequest
from podserve.gateway.store.base import ScopeSpec, WindowSpec


def refusal_message(refusal: Refusal) -> str:
    if refusal.reason.value == "budget":
        return f"budget exhausted for {refusal.scope}"
    return f"rate limit reached for {refusal.scope}; retry in {refusal.retry_after_s}s"


def refuse_what_never_fits(
    plan: HoldPlan, tpm: tuple[WindowSpec, ...], scopes: Iterable[ScopeSpec] = ()
) -> None:
    """400 for a request no budget period or rate window could ever admit."""
    least = plan.prompt_tokens + plan.min_tokens
    for window in tpm:
        if least > window.limit:
            raise InvalidRequest(
                f"this request needs at least {least} tokens of {window.name}'s limit of "
                f"{window.limit} a minute (its prompt and max_tokens): it can never be "
                "admitted; send a shorter prompt or a smaller max_tokens"
            )
    cost = plan.rate.cost_micro(plan.prompt_tokens, plan.min_tokens)
    for scope in scopes:
        if scope.limit_micro is not None and cost > scope.limit_micro:
            raise InvalidRequest(
                f"this request holds at least {cost} micro-dollars (its prompt and "
                f"max_tokens at the model's price), more than {scope.name}'s whole budget "
                f"of {scope.limit_micro} micro-dollars: it can never be admitted; send a "
                "shorter prompt or a smaller max_tokens"
            )
