"""`--event KIND@SECONDS[:ARG]`: what happens to the cluster during a simulation."""

from __future__ import annotations

import re
from dataclasses import dataclass

from podserve.core.errors import InvalidInput

KINDS = {
    "rollout": "template change of every serving workload (ARG: one workload's name)",
    "spot-reclaim": "reclaim every node of a spot pool (ARG: the pool)",
    "node-drain": "cordon a node and evict its pods through the Eviction API (ARG: the node)",
    "metrics-down": "the metrics pipeline fails for ARG seconds",
}
_EVENT = re.compile(r"^(?P<kind>[a-z-]+)@(?P<t>\d+(\.\d+)?)(:(?P<arg>.+))?$")


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    t: float
    arg: str | None

    def label(self) -> str:
        return f"{self.kind}@{self.t:g}" + (f":{self.arg}" if self.arg else "")


def parse_event(text: str) -> Event:
    match = _EVENT.match(text.strip())
    if match is None:
        raise InvalidInput(f"--event {text!r}: expected KIND@SECONDS[:ARG]")
    kind, arg = match["kind"], match["arg"]
    if kind not in KINDS:
        raise InvalidInput(f"--event {text!r}: unknown kind {kind!r}; known: {', '.join(KINDS)}")
    if kind in {"spot-reclaim", "node-drain", "metrics-down"} and not arg:
        raise InvalidInput(f"--event {text!r}: {kind} needs :ARG ({KINDS[kind]})")
    if kind == "metrics-down":
        try:
            if float(arg or "") <= 0:
                raise ValueError
        except ValueError:
            raise InvalidInput(f"--event {text!r}: metrics-down needs :SECONDS > 0") from None
    return Event(kind, float(match["t"]), arg)
