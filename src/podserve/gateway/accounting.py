"""Who is asking and may they: keys (cached), then one atomic reservation in the store;
afterwards, the settlement. The store is called under a deadline: an answer that does not
come within `storeTimeoutMs`, or a store taken for down after calls in a row failed, fails
the request closed (503 + Retry-After), or, opted in, falls back to `LocalBudgets`
(`store_calls.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from podserve.config.gateway_config import GatewayConfig, OnBudgetShort
from podserve.gateway.asgi import ClientGone
from podserve.gateway.budget import Grant, HoldPlan, Refusal, RefusalReason, Usage, plan_hold
from podserve.gateway.budget_wait import Waiters, poll_delays
from podserve.gateway.client_watch import ClientWatch
from podserve.gateway.counting import PromptCounting, prompt_counters
from podserve.gateway.errors import (
    InvalidRequest,
    ModelForbidden,
    OverLimit,
    StoreDown,
    Unauthorized,
    shown,
)
from podserve.gateway.failopen import LocalBudgets
from podserve.gateway.hold_parts import rate_windows, reservation_id
from podserve.gateway.key_limits import KeyLimits, key_limits
from podserve.gateway.keys import KeyRecord, hash_key
from podserve.gateway.leases import OpenHolds
from podserve.gateway.money import Rate
from podserve.gateway.prices import price_table
from podserve.gateway.refusals import refusal_message, refuse_what_never_fits
from podserve.gateway.store.base import (
    Charge,
    Hold,
    Labels,
    Outcome,
    Settlement,
    Store,
)
from podserve.gateway.store_calls import StoreCalls
from podserve.gateway.wire import Billable, Endpoint

MAX_UNSETTLED = 100_000  # settlements held for retry: a few MB at most
log = logging.getLogger("podserve.gateway")


_KEY_LIMITS_MAX = 4096


@dataclass(frozen=True, slots=True)
class Admission:
    reservation_id: str
    key: KeyRecord
    model: str
    rate: Rate
    prompt_tokens: int
    max_tokens: int | None  # the cap forwarded upstream (None: the request has none)
    local: bool  # admitted by LocalBudgets while the store was down
    request_id: str = ""
    # Its scopes and tpm windows, as refusals name them: its settlement wakes the
    # requests waiting on them (budget_wait).
    wakes: tuple[str, ...] = ()


class Accounting:
    def __init__(
        self,
        config: GatewayConfig,
        store: Store,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self.store = store
        self._wall = wall
        self._mono = monotonic
        # An in-process store (SQLite) cannot hang on a network: no deadline (sqlite.py).
        self.calls = StoreCalls(
            config.store_timeout_ms / 1000,
            bool(getattr(store, "in_process", False)),
            monotonic,
            config.store_breaker.failures,
            config.store_breaker.open_s,
            config.store_breaker.min_span_s,
        )
        self._keys: dict[str, tuple[KeyRecord, float]] = {}
        self._lookups: dict[str, asyncio.Future[KeyRecord | None]] = {}
        self.waiters = Waiters()  # requests waiting for budget (budgetWaitS)
        self.open = OpenHolds(config.defaults.lease_s)  # in flight: leases renewed
        self._local = LocalBudgets(config.fail_open.replicas)
        # Settlements the store did not take (down, or a SQLite file locked by another
        # writer): housekeeping retries them until it does or their lease runs out
        # (`retry_settlements`). Dropped, each lease charged its request in full. The
        # second member: until when to keep settling one that finds nothing to settle
        # (the release of a reservation whose outcome is unknown), else None.
        self._unsettled: deque[tuple[Settlement, float | None]] = deque(maxlen=MAX_UNSETTLED)
        self.prices = price_table(config)
        # The releases of reservations made after their deadline.
        self._background: set[asyncio.Future[Any]] = set()
        self._key_limits: dict[KeyRecord, KeyLimits] = {}
        self.counting = PromptCounting(prompt_counters(config))

    def deadline(self) -> float:
        """A request's store deadline (`StoreCalls.deadline`)."""
        return self.calls.deadline()

    # --- keys ------------------------------------------------------------------------
    async def authenticate(
        self, authorization: str | None, deadline: float | None = None
    ) -> KeyRecord:
        if not authorization or not authorization.lower().startswith("bearer "):
            raise Unauthorized("missing API key: send Authorization: Bearer <key>")
        digest = hash_key(authorization[7:].strip())
        now = self._mono()
        cached = self._keys.get(digest)
        if cached is not None and now - cached[1] < self._config.key_cache_s:
            record: KeyRecord | None = cached[0]
        else:
            try:
                record = await self._lookup(digest, deadline)
            except StoreDown:
                if cached is None or not self._config.fail_open.enabled:
                    raise
                record = cached[0]  # fail-open: a key we knew a moment ago
            if record is not None:
                self._keys[digest] = (record, now)
        if record is None:
            raise Unauthorized("invalid API key")
        if record.revoked:
            raise Unauthorized("API key revoked")
        if not record.usable(self._wall()):
            raise Unauthorized("API key expired")
        return record

    async def _lookup(self, digest: str, deadline: float | None = None) -> KeyRecord | None:
        """One store query per key however many requests wait on it (a burst of new
        connections would otherwise queue one lookup each)."""
        pending = self._lookups.get(digest)
        if pending is None:
            pending = asyncio.ensure_future(
                self.calls.call(lambda: self.store.find_key(digest), deadline)
            )
            self._lookups[digest] = pending
            pending.add_done_callback(lambda _f: self._lookups.pop(digest, None))
        return await asyncio.shield(pending)

    # --- admission -------------------------------------------------------------------
    def rate(self, model: str) -> Rate:
        """The rate `model`'s requests reserve at: its dearest upstream's (prices.py)."""
        return self.prices.hold_rate(model)

    def _limits(self, key: KeyRecord) -> KeyLimits:
        """The key's budget scopes and rate limits: the same on each of its requests, so
        built once per key record (a changed record is another cache entry)."""
        found = self._key_limits.get(key)
        if found is None:
            if len(self._key_limits) >= _KEY_LIMITS_MAX:
                self._key_limits.clear()
            found = self._key_limits[key] = key_limits(key, self._config)
        return found

    async def admit(
        self,
        key: KeyRecord,
        bill: Billable,
        request_id: str = "",
        deadline: float | None = None,
        watch: ClientWatch | None = None,
    ) -> Admission:
        """Reserve the request's hold. `watch`: its client, whose leaving ends a wait for
        budget (ClientGone; nothing is held, nothing charged)."""
        if not key.allows(bill.model):
            raise ModelForbidden(f"this key may not use model '{shown(bill.model)}'")
        rate = self.rate(bill.model)
        prompt = await self.counting.prompt_tokens(bill)
        if bill.media_parts:
            prompt += bill.media_parts * self._media_part_tokens(bill.model)
        generates = bill.endpoint in (Endpoint.COMPLETIONS, Endpoint.CHAT)
        if generates:
            requested = None if bill.max_tokens is None else bill.max_tokens * bill.choices
            default = self._config.defaults.max_tokens * bill.choices
            clamp = self._config.defaults.on_budget_short is OnBudgetShort.CLAMP
            plan = plan_hold(prompt, requested, default, clamp, rate)
            plan = HoldPlan(
                plan.prompt_tokens, plan.max_tokens, max(plan.min_tokens, bill.choices), rate
            )
        else:
            plan = HoldPlan(prompt, 0, 0, rate)
        limits = self._limits(key)
        # One reading: the budget periods and the rate windows the hold counts in are its,
        # and so is the ledger row's `reserved_at`.
        now = self._wall()
        rpm, tpm = rate_windows(limits, now)
        scopes = limits.scopes_at(now)
        refuse_what_never_fits(plan, tpm, scopes)
        hold = Hold(
            reservation_id=reservation_id(self._wall()),
            plan=plan,
            scopes=scopes,
            rpm=rpm,
            tpm=tpm,
            lease_until=now + self._config.defaults.lease_s,
            labels=Labels(key.key_id, key.team, key.namespace, bill.model, request_id),
            reserved_at=now,
        )
        local = False
        wait_until = self._mono() + self._config.defaults.budget_wait_s
        polls, waited = poll_delays(), False
        while True:
            try:
                decision = await self.calls.call(
                    lambda: self.store.reserve(hold),
                    deadline,
                    lambda late: self._release(hold, late),
                    unknown=partial(self._release_unknown, hold),
                )
                deadline = None  # a wait for budget below is not the store's slowness
            except StoreDown:
                if not self._config.fail_open.enabled:
                    raise
                log.warning("store down: admitting against the local share of the budget")
                decision, local = self._local.reserve(hold, self._mono()), True
            if (
                not isinstance(decision, Refusal)
                or not decision.may_fit_later
                or self._mono() >= wait_until
            ):
                break
            # Outstanding holds will settle at or below their amount: wait for one (here,
            # or on another replica: hence the poll) instead of a false 429.
            delay = min(next(polls), max(0.0, wait_until - self._mono()))
            if not waited:  # once a request, not per retry
                waited = True
                log.info(
                    "waiting for budget", extra={"key_id": key.key_id, "scope": decision.scope}
                )
            gone = None if watch is None else watch.gone()
            if not await self.waiters.wait(decision.scope, delay, gone):
                log.info("client left while waiting for budget", extra={"key_id": key.key_id})
                raise ClientGone
        if isinstance(decision, Refusal):
            if not local and decision.reason is RefusalReason.BUDGET and not decision.may_fit_later:
                # Remembered for fail-open: a budget the store said is spent is not
                # handed out again as a fresh local share while the store is down.
                self._local.spent(decision.scope, self._mono() + decision.retry_after_s)
            raise OverLimit(
                refusal_message(decision), decision.reason.value, decision.retry_after_s
            )
        assert isinstance(decision, Grant)
        if not local:
            self.open.add(hold.reservation_id)
            if self._config.fail_open.enabled:
                self._local.known(hold, decision, self._mono())
        cap = decision.max_tokens // bill.choices if generates else None
        wakes = tuple([s.name for s in scopes]) + tuple([w.name for w in tpm])
        rid = hold.reservation_id
        return Admission(rid, key, bill.model, rate, prompt, cap, local, request_id, wakes)

    def _release(self, hold: Hold, late: Grant | Refusal) -> None:
        """A reservation granted after its request was refused (the store answered past
        the deadline): settle it at zero now rather than let its lease charge it in full."""
        if not isinstance(late, Grant):
            return
        nothing = Settlement(hold.reservation_id, Usage(0, 0), 0, "", Outcome.ERROR, self._wall())
        task = asyncio.ensure_future(
            self.calls.call(lambda: self.store.settle(nothing), refusable=False)
        )
        self._background.add(task)
        task.add_done_callback(self._released)

    def _media_part_tokens(self, model: str) -> int:
        price = self._config.prices.get(model)
        bound = None if price is None else price.media_part_tokens
        if bound is None:
            raise InvalidRequest(
                f"model '{shown(model)}' takes no non-text message content parts (an image, "
                "audio) through this gateway: "
                "their prompt tokens are unbounded until its operator sets "
                f"prices.{shown(model)}.mediaPartTokens"
            )
        return bound

    def _release_unknown(self, hold: Hold) -> None:
        """A reservation call that missed its deadline, then failed: on a hung Redis the
        client's socket timeout ends it, but the script was sent and runs when Redis
        resumes, so its request, refused with a 503, was charged in full by the lease.
        Housekeeping settles it at zero until that succeeds or its lease is over (before
        it lands, a settlement finds nothing: it is tried again)."""
        nothing = Settlement(hold.reservation_id, Usage(0, 0), 0, "", Outcome.ERROR, self._wall())
        self._unsettled.append((nothing, hold.lease_until + self._config.defaults.lease_s))

    def _released(self, task: asyncio.Future[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("a late reservation could not be released: its lease will charge it")

    async def quiesce(self) -> None:
        """Wait for late store calls and their releases (shutdown; tests)."""
        while self._background or self.calls.background:
            pending = [*self._background, *self.calls.background]
            await asyncio.gather(*pending, return_exceptions=True)

    async def settle(
        self, admission: Admission, usage: Usage, outcome: Outcome, upstream: str
    ) -> int:
        """Record the real cost, at the price of the upstream that served it; returns it
        in micro-dollars."""
        rate = self.prices.billed_rate(admission.model, upstream)
        cost = rate.cost_micro(usage.prompt_tokens, usage.completion_tokens)
        try:
            return await self._settle(admission, usage, outcome, upstream, cost)
        finally:
            self.open.discard(admission.reservation_id)
            self.waiters.wake(admission.wakes)

    async def renew_leases(self) -> int:
        """Renew the leases of the holds in flight here, when due (housekeeping)."""
        if not self.open.due(self._mono()):
            return 0
        return await self.open.renew(self.store, self._wall(), self._mono())

    async def retry_settlements(self) -> int:
        """Settle again what the store did not take; how many are still waiting. A
        settlement is idempotent (the second finds its reservation gone), and one whose
        lease ran out meanwhile finds it charged: either way it is done."""
        unsettled = self._unsettled
        for _ in range(len(unsettled)):
            settlement, until = unsettled[0]
            done = await self.calls.call(partial(self.store.settle, settlement), refusable=False)
            unsettled.popleft()
            if not done and until is not None and self._wall() < until:
                unsettled.append((settlement, until))  # its reservation may land yet
        return len(unsettled)

    async def flush_offline(self) -> int:
        """Record the charges made while the store was down; how many are still pending."""
        pending = self._local.pending
        while pending:
            await self.calls.call(partial(self.store.charge, pending[0]), refusable=False)
            pending.pop(0)
        return len(pending)

    async def _settle(
        self, admission: Admission, usage: Usage, outcome: Outcome, upstream: str, cost: int
    ) -> int:
        settlement = Settlement(
            admission.reservation_id, usage, cost, upstream, outcome, self._wall()
        )
        if admission.local:
            scopes = self._local.scopes_of(admission.reservation_id)
            self._local.settle(admission.reservation_id, cost)
            key = admission.key
            labels = Labels(
                key.key_id, key.team, key.namespace, admission.model, admission.request_id
            )
            self._local.pending.append(Charge(settlement, scopes, labels))
            log.warning(
                "settled while the store was down",
                extra={"key_id": key.key_id, "cost_micro": cost},
            )
            return cost
        try:
            done = await self.calls.call(lambda: self.store.settle(settlement), refusable=False)
            if not done:
                # Its lease ran out first (renewals failed: a store outage, a stalled
                # replica), and the sweep charged the whole hold: never less than this
                # cost, so the budget is safe, but the request is overcharged. Logged
                # with its real usage so that it can be found and refunded.
                log.warning(
                    "settled after its lease expired: charged its whole hold instead",
                    extra={
                        "reservation_id": admission.reservation_id,
                        "key_id": admission.key.key_id,
                        "cost_micro": cost,
                        "prompt_tokens": usage.prompt_tokens,
                        "completion_tokens": usage.completion_tokens,
                        "upstream": upstream,
                    },
                )
        except StoreDown:
            # The reservation stays held; retried by housekeeping, and if the store is not
            # back before its lease runs out, the lease charges it in full.
            self._unsettled.append((settlement, None))
            log.error("settlement failed: retried until the reservation's lease runs out")
        except Exception:
            # Not the store's failure (a bug): this request's reservation is left to its
            # lease; the request and the others settling with it go on.
            log.exception("settlement failed: the lease will charge the reservation")
        return cost
