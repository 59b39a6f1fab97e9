"""`podserve gateway`: keys, hard token budgets, rate limits, cost and load-aware routing in
front of podserve pods and hosted OpenAI-compatible APIs (docs/gateway.md).

Pure decisions (`budget`, `limits`, `routing`, `retry_budget`, `breaker`, `money`) take
time as an argument; I/O lives in `app` (HTTP edge), `forward`/`relay` (upstreams),
`scrape` (pod metrics) and `store` (SQLite, or Redis + PostgreSQL).
"""

from podserve.gateway.app import OVERHEAD_HEADER, Gateway
from podserve.gateway.budget import Grant, HoldPlan, Refusal, RefusalReason, Usage, grant
from podserve.gateway.money import Rate
from podserve.gateway.store.base import Dimension, Store, StoreUnavailable
from podserve.gateway.stores import open_store

__all__ = [
    "OVERHEAD_HEADER",
    "Dimension",
    "Gateway",
    "Grant",
    "HoldPlan",
    "Rate",
    "Refusal",
    "RefusalReason",
    "Store",
    "StoreUnavailable",
    "Usage",
    "grant",
    "open_store",
]
