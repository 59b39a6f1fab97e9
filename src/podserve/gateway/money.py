"""Money in integers: prices as nano-dollars per token, charges as micro-dollars.

A price of X USD per million tokens is X micro-dollars per token, so nano-dollars per token
keep three more digits (0.075 USD/M is 75). Every charge rounds *up* to a whole
micro-dollar, once per request: a budget can only be over-estimated, never undercut, and
the ledger is the sum of the same integers the budget was checked against (no float drift,
LiteLLM's float spend columns being the counter-example).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

MICRO_PER_USD = 1_000_000
NANO_PER_MICRO = 1_000
# An output price of 0 makes every max_tokens affordable; cap the arithmetic there.
UNBOUNDED_TOKENS = 1 << 40


def usd_to_micro(usd: Decimal) -> int:
    return int((usd * MICRO_PER_USD).to_integral_value(rounding=ROUND_CEILING))


def micro_to_usd(micro: int) -> float:
    return micro / MICRO_PER_USD


@dataclass(frozen=True, slots=True)
class Rate:
    """A model's price: nano-dollars per input and per output token."""

    input_nano: int
    output_nano: int

    @classmethod
    def per_million_usd(cls, input_usd: Decimal, output_usd: Decimal) -> Rate:
        def nano(usd: Decimal) -> int:
            return int((usd * NANO_PER_MICRO).to_integral_value(rounding=ROUND_CEILING))

        return cls(nano(input_usd), nano(output_usd))

    def cost_micro(self, prompt_tokens: int, completion_tokens: int) -> int:
        nano = prompt_tokens * self.input_nano + completion_tokens * self.output_nano
        return -(-nano // NANO_PER_MICRO)  # ceiling division on integers

    def max_output_within(self, avail_micro: int, prompt_tokens: int) -> int:
        """The largest n with cost_micro(prompt, n) <= avail (-1 when not even n = 0 fits).

        ceil(x / 1000) <= a  <=>  x <= 1000 a, so the bound is exact in integers.
        """
        room_nano = avail_micro * NANO_PER_MICRO - prompt_tokens * self.input_nano
        if room_nano < 0:
            return -1
        if self.output_nano == 0:
            return UNBOUNDED_TOKENS
        return room_nano // self.output_nano


FREE = Rate(0, 0)
