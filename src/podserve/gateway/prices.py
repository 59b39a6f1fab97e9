"""The rate a request reserves at, and the rate it is billed at once an upstream served it.

`prices.<model>` is a model's price. An upstream may charge otherwise for it (`pools[].prices`,
`fallbacks[].prices`: a hosted API's list price, a canary pool on other GPUs), and which
upstream serves a request is known only after its reservation: the router picks at send
time, and a retry or a fallback may move it. So a request reserves at the model's
dearest upstream, input and output prices taken apart, and is billed at the one that
served it. The hold then covers every possible bill (the same tokens at a price no lower
in either part), which keeps spend <= budget; the ledger is usage x the serving
upstream's price, so a fallback to a hosted API is not recorded at the pool's GPU-hour
price.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podserve.config.gateway_config import Fallback, GatewayConfig, Pool
from podserve.gateway.money import FREE, Rate


@dataclass(frozen=True, slots=True)
class PriceTable:
    hold: dict[str, Rate] = field(default_factory=dict)  # per model
    served: dict[tuple[str, str], Rate] = field(default_factory=dict)  # (model, upstream)

    def hold_rate(self, model: str) -> Rate:
        return self.hold.get(model, FREE)

    def billed_rate(self, model: str, upstream: str) -> Rate:
        """What `upstream` charges for `model`; the hold's rate when no upstream served."""
        found = self.served.get((model, upstream))
        return self.hold_rate(model) if found is None else found


def price_table(config: GatewayConfig) -> PriceTable:
    base = {m: Rate.per_million_usd(*p.per_million_usd()) for m, p in config.prices.items()}
    served: dict[tuple[str, str], Rate] = {}
    upstreams: list[Pool | Fallback] = [*config.pools, *config.fallbacks]
    for upstream in upstreams:
        for model in upstream.models:
            own = upstream.prices.get(model)
            rate = (
                base.get(model, FREE)
                if own is None
                else Rate.per_million_usd(*own.per_million_usd())
            )
            served[(model, upstream.name)] = rate
    # Only what an upstream can bill: a `prices.<model>` that every upstream overrides is
    # not reserved for.
    routed = {model for model, _ in served}
    hold = {m: r for m, r in base.items() if m not in routed}
    for (model, _), rate in served.items():
        found = hold.get(model)
        hold[model] = (
            rate
            if found is None
            else Rate(
                max(found.input_nano, rate.input_nano), max(found.output_nano, rate.output_nano)
            )
        )
    return PriceTable(hold, served)
