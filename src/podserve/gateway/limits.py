"""Rate-limit windows: fixed one-minute windows named by their start, shared by replicas.

A counter per (scope, window) is incremented atomically in the store before forwarding, so
the limit holds exactly in every window however many replicas share the store (a counter
per process multiplies the limit by the replica count: LiteLLM #40291, #27736). Token
windows are charged the prompt plus the output cap up front and lowered to the real usage
at settlement; what a window records is therefore never below what it let through.
"""

from __future__ import annotations

from dataclasses import dataclass

WINDOW_S = 60


@dataclass(frozen=True, slots=True)
class Window:
    index: int  # minutes since the epoch
    resets_in_s: float

    def counter(self, kind: str, scope: str) -> str:
        return f"{kind}:{scope}:{self.index}"


def window_at(wall_s: float) -> Window:
    """The window a wall-clock instant falls in (replicas agree through NTP-synced clocks)."""
    index = int(wall_s // WINDOW_S)
    return Window(index, (index + 1) * WINDOW_S - wall_s)
