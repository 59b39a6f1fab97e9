"""A retry budget: retries stay a fixed fraction of requests (Finagle's RetryBudget).

Each request deposits `ratio` of a retry; each retry withdraws one. With ratio 0.2 the
retries never exceed 20% of the requests seen, so a failing pool costs at most 1.2x its
traffic instead of the (1 + retries)x a per-request retry count gives. The balance is
capped so a long quiet spell cannot save up a retry storm.
(twitter/finagle finagle-core/src/main/scala/com/twitter/finagle/service/RetryBudget.scala;
Envoy's `retry_budget.budget_percent` is the same idea over active requests.)
"""

from __future__ import annotations


class RetryBudget:
    __slots__ = ("_balance_milli", "_max_milli", "_ratio_milli", "requests", "retries")

    def __init__(self, ratio: float = 0.2, max_retries_saved: int = 100) -> None:
        # Thousandths of a retry, in integers: 5 x 0.2 is exactly one retry.
        self._ratio_milli = round(ratio * 1000)
        self._max_milli = max_retries_saved * 1000
        self._balance_milli = 0
        self.requests = 0
        self.retries = 0

    def on_request(self) -> None:
        self.requests += 1
        self._balance_milli = min(self._max_milli, self._balance_milli + self._ratio_milli)

    def try_retry(self) -> bool:
        if self._balance_milli < 1000:
            return False
        self._balance_milli -= 1000
        self.retries += 1
        return True
