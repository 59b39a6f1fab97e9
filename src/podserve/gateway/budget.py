"""Reserve before forwarding, settle from usage: the pure arithmetic every store applies
atomically.

A request is admitted only if, for every budget scope it belongs to (key, team, namespace),

    committed + reserved + cost(prompt_bound, n) <= limit

where n is the output cap it is forwarded with, and, for each rate window, the count plus
this request stays within the limit. `grant` takes the scopes' current state and returns
the largest admissible n (`reject` mode needs n = the requested cap; `clamp` accepts any
n >= 1). Stores run `grant` and the counter updates inside one transaction (SQLite) or one
Lua script (Redis), so concurrent requests cannot all pass on the same remaining budget
(Envoy AI Gateway charges after the response, envoyproxy/ai-gateway#680; LiteLLM added a
pre-call reservation for the same reason).

Settlement replaces the reservation with the real cost (`Rate.cost_micro` of the upstream's
usage), which is never larger: the prompt was over-counted or exact and the output was
capped by n. Therefore spend <= limit at every instant — the guarantee docs/gateway.md states.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from podserve.gateway.money import Rate


class RefusalReason(StrEnum):
    BUDGET = "budget"
    RPM = "rpm"
    TPM = "tpm"


@dataclass(frozen=True, slots=True)
class HoldPlan:
    """What a request asks to reserve: its prompt bound, and the output cap range."""

    prompt_tokens: int
    max_tokens: int
    min_tokens: int  # == max_tokens when refusing rather than clamping
    rate: Rate


def plan_hold(
    prompt_tokens: int, requested_max: int | None, default_max: int, clamp: bool, rate: Rate
) -> HoldPlan:
    cap = requested_max if requested_max is not None else default_max
    return HoldPlan(prompt_tokens, cap, 1 if clamp else cap, rate)


@dataclass(frozen=True, slots=True)
class ScopeState:
    """A budget holder as the store sees it now (micro-dollars; limit None = unlimited)."""

    name: str  # e.g. "key:ab12", "team:search"
    limit_micro: int | None
    committed_micro: int
    reserved_micro: int
    refills_in_s: float | None = None  # a periodic budget starts again then (None: never)

    @property
    def available_micro(self) -> int | None:
        if self.limit_micro is None:
            return None
        return self.limit_micro - self.committed_micro - self.reserved_micro


@dataclass(frozen=True, slots=True)
class WindowState:
    """A rate-limit counter in its current window."""

    name: str  # e.g. "rpm:key:ab12"
    limit: int
    used: int
    resets_in_s: float
    # Of `used`, what outstanding reservations hold (tpm: prompt + output cap each); their
    # settlements give back what they did not use, so a refusal may fit before the reset.
    held: int = 0


@dataclass(frozen=True, slots=True)
class Grant:
    max_tokens: int
    amount_micro: int
    tpm_tokens: int  # charged to every tpm window: prompt + output cap
    # Per scope of the hold, in its order: limit - committed as the store saw it before
    # this grant (None: no limit). Holds outstanding are left out: they may settle lower.
    # Fail-open caps a replica's share with it (failopen.py); not part of the decision.
    unspent_micro: tuple[int | None, ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: RefusalReason
    scope: str
    retry_after_s: int
    # Budget refusals while other reservations are outstanding: they settle at or below
    # their hold, so waiting for them may let this request fit without overshooting.
    may_fit_later: bool = False


def grant(
    plan: HoldPlan,
    budgets: Sequence[ScopeState],
    rpm: Sequence[WindowState] = (),
    tpm: Sequence[WindowState] = (),
) -> Grant | Refusal:
    for window in rpm:
        if window.used + 1 > window.limit:
            return Refusal(RefusalReason.RPM, window.name, _ceil_s(window.resets_in_s))
    n = plan.max_tokens
    for window in tpm:
        n = min(n, window.limit - window.used - plan.prompt_tokens)
        if n < plan.min_tokens:
            return tpm_refusal(window.name, window.resets_in_s, window.held)
    for scope in budgets:
        avail = scope.available_micro
        if avail is None:
            continue
        n = min(n, plan.rate.max_output_within(avail, plan.prompt_tokens))
        if n < plan.min_tokens:
            assert scope.limit_micro is not None  # avail is None without one
            unheld = scope.limit_micro - scope.committed_micro
            fits = plan.rate.max_output_within(unheld, plan.prompt_tokens) >= plan.min_tokens
            return budget_refusal(scope.name, scope.refills_in_s, scope.reserved_micro, fits)
    unspent = tuple(
        None if s.limit_micro is None else s.limit_micro - s.committed_micro for s in budgets
    )
    return Grant(n, plan.rate.cost_micro(plan.prompt_tokens, n), plan.prompt_tokens + n, unspent)


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int


def cancelled_usage(prompt_tokens: int, tokens_sent: int) -> Usage:
    """A stream the client abandoned: its prompt plus the tokens already sent.

    The prompt count is the reservation's (exact with the model's tokenizer, else the safe
    bound): the upstream never reports usage for a stream cut short.
    """
    return Usage(prompt_tokens, tokens_sent)


def settle_cost(rate: Rate, usage: Usage) -> int:
    return rate.cost_micro(usage.prompt_tokens, usage.completion_tokens)


def tpm_refusal(name: str, resets_in_s: float, held: int) -> Refusal:
    """A tpm window too full for the request. While reservations hold tokens in it, their
    settlements give back what they did not use (a request held at max_tokens that
    stopped early): retry in a second, as for a budget, not at the window's end."""
    if held > 0:
        return Refusal(RefusalReason.TPM, name, 1, may_fit_later=True)
    return Refusal(RefusalReason.TPM, name, _ceil_s(resets_in_s))


def budget_refusal(
    scope: str, refills_in_s: float | None, reserved_micro: int, fits_unheld: bool
) -> Refusal:
    """A scope too short for the request. Outstanding reservations will settle (usually
    below their hold), so it is worth a wait and a retry soon, but only if the request
    would fit once every one of them had settled at nothing (`fits_unheld`: its least
    hold within limit - committed). Otherwise no settlement can make room: before, any
    hold outstanding made it wait its whole `budgetWaitS` for a certain 429. A budget
    spent outright comes back only with its next period."""
    pending = reserved_micro > 0 and fits_unheld
    return Refusal(
        RefusalReason.BUDGET, scope, budget_retry_after_s(refills_in_s, pending), pending
    )


def budget_retry_after_s(refills_in_s: float | None, pending: bool) -> int:
    """Retry-After for a budget refusal: 1 s while holds may still settle, else when the
    budget's period ends (a periodic budget), else an hour."""
    if pending:
        return 1
    return 3600 if refills_in_s is None else _ceil_s(refills_in_s)


def _ceil_s(seconds: float) -> int:
    return max(1, int(-(-seconds // 1)))
