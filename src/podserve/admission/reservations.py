"""Queue slots promised to requests admitted from their URL, while their bodies are read
and decoded (issue 15 item 9).

An edge decides whether a tensor request may enter before it reads the body
(`DataPlane.admit_early`): a queue that is full refuses it unread, which costs next to
nothing. But reading and decoding the body of an admitted request takes time (a 330 KB
JSON body is ~2 ms of the event loop), and while it does, the request is not yet in the
queue: every other request that arrives then still sees room, is admitted too, and is
then refused by the queue itself *after* its body was decoded. Measured with
benchmarks/overload.py (40 clients ignoring Retry-After, `--max-queue 8`): 45% of the
503s without backoff and 58% with backoff were such late refusals, each costing a full
read and decode of the event loop the model's batches also need.

So admission at the URL takes a slot: `reserve` succeeds only while queued requests plus
slots already promised stay under the bound, and the holder releases its slot the moment
it enters the queue (or fails before it gets there). Then a request admitted from its
URL finds its slot when it arrives, and every refusal happens before a body is read.

Pure bookkeeping, no clock and no I/O: the caller tells how many are queued now.
"""

from __future__ import annotations

__all__ = ["QueueReservations", "Reservation"]


class Reservation:
    """One promised slot. `release()` gives it back; releasing twice is a no-op, so an
    edge can release in a `finally` whatever the data plane did already."""

    __slots__ = ("_key", "_owner")

    def __init__(self, owner: QueueReservations, key: str) -> None:
        self._owner: QueueReservations | None = owner
        self._key = key

    @property
    def held(self) -> bool:
        return self._owner is not None

    def release(self) -> None:
        owner, self._owner = self._owner, None
        if owner is not None:
            owner._give_back(self._key)


class QueueReservations:
    """Promised slots per queue (`key`: a model version's queue)."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[str, int] = {}

    def held(self, key: str) -> int:
        """Slots promised on `key` and not released."""
        return self._held.get(key, 0)

    def full(self, key: str, queued: int, limit: int) -> bool:
        """Whether a queue holding `queued` requests, bounded by `limit`, has no slot left
        for one more (counting the slots already promised)."""
        return queued + self.held(key) >= limit

    def reserve(self, key: str, queued: int, limit: int) -> Reservation | None:
        """A slot on `key`, or None when `queued` plus the promised slots reach `limit`."""
        if self.full(key, queued, limit):
            return None
        self._held[key] = self.held(key) + 1
        return Reservation(self, key)

    def _give_back(self, key: str) -> None:
        count = self._held[key] - 1
        if count:
            self._held[key] = count
        else:
            del self._held[key]  # no key lingers for a model that was unloaded
