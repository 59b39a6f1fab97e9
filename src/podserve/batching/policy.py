"""Decides which queued requests form the next batch, and when.

Triton's dynamic batcher semantics, plus a work-conserving default:

- Requests queue in arrival order (FIFO); a batch is a prefix of the queue whose rows
  (each request's batch dimension) sum to at most `max_batch_size`.
- A batch goes at once when it reaches `max_batch_size` or one of `preferred_batch_sizes`
  (the largest such prefix is taken).
- Otherwise, work-conserving (default): when a worker is idle the prefix goes at once, so
  a lone request never waits for company; batches grow from what arrives while every
  worker is busy.
- Otherwise (classic Triton): the prefix goes once its oldest request has waited
  `max_queue_delay_s`; `wake_at_s` tells the caller when that is.

The caller owns workers and time: it calls `next_batch(now_s, idle_workers)` after every
arrival, completion and wake-up, and runs what it gets. `next_full_batch()` hands out a
batch that can no longer grow even while every worker is busy, for the caller to stage.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Key = TypeVar("Key")


@dataclass(frozen=True, slots=True)
class BatchPolicyConfig:
    max_batch_size: int = 32
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_s: float = 0.0
    work_conserving: bool = True
    enabled: bool = True

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        if self.max_queue_delay_s < 0:
            raise ValueError("max_queue_delay_s must be >= 0")


@dataclass(slots=True)
class _Entry:
    rows: int
    enqueued_s: float


@dataclass(slots=True)
class BatchPolicy(Generic[Key]):
    config: BatchPolicyConfig
    _queue: OrderedDict[Key, _Entry] = field(default_factory=OrderedDict)
    _queued_rows: int = 0

    @property
    def limit_rows(self) -> int:
        return self.config.max_batch_size if self.config.enabled else 1

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def queued_rows(self) -> int:
        return self._queued_rows

    def add(self, key: Key, rows: int, now_s: float) -> None:
        if rows < 1:
            raise ValueError("a request contributes at least one row")
        if key in self._queue:
            raise KeyError(f"request {key!r} is already queued")
        self._queue[key] = _Entry(rows=rows, enqueued_s=now_s)
        self._queued_rows += rows

    def remove(self, key: Key) -> bool:
        """Drop a queued request (cancelled or expired). False if it is not queued."""
        entry = self._queue.pop(key, None)
        if entry is None:
            return False
        self._queued_rows -= entry.rows
        return True

    def oldest_enqueued_s(self) -> float | None:
        for entry in self._queue.values():
            return entry.enqueued_s
        return None

    def next_batch(self, now_s: float, idle_workers: int) -> list[Key] | None:
        """The keys of the batch to run now, removed from the queue; None if none should go."""
        if idle_workers <= 0 or not self._queue:
            return None
        prefix, rows, cut = self._prefix()
        if not self._should_dispatch(prefix, rows, cut, now_s):
            return None
        keys = prefix[:cut]
        for key in keys:
            self._queued_rows -= self._queue.pop(key).rows
        return keys

    def next_full_batch(self) -> list[Key] | None:
        """The keys of a batch that can no longer grow, removed from the queue; None if
        the queue holds none. A batch is full when its rows reach `max_batch_size` or the
        next request in line would not fit. The caller stages such a batch behind a busy
        worker; waiting could not make it any bigger."""
        if not self._queue:
            return None
        keys, sums, _ = self._prefix()
        if sums[-1] < self.limit_rows and len(keys) == len(self._queue):
            return None
        for key in keys:
            self._queued_rows -= self._queue.pop(key).rows
        return keys

    def wake_at_s(self) -> float | None:
        """When a waiting batch must go because its oldest request hit the delay."""
        if self.config.work_conserving or not self._queue:
            return None
        oldest = self.oldest_enqueued_s()
        return None if oldest is None else oldest + self.config.max_queue_delay_s

    def _prefix(self) -> tuple[list[Key], list[int], int]:
        """The largest FIFO prefix within the row limit, its cumulative row sums, and how
        many of its requests to take (the largest preferred-size prefix when one exists)."""
        limit = self.limit_rows
        keys: list[Key] = []
        sums: list[int] = []
        total = 0
        for key, entry in self._queue.items():
            # A request larger than the limit runs alone rather than starving the queue;
            # admission rejects those for models that batch, so this guards only misuse.
            if keys and total + entry.rows > limit:
                break
            total += entry.rows
            keys.append(key)
            sums.append(total)
            if total >= limit:
                break
        cut = len(keys)
        preferred = set(self.config.preferred_batch_sizes)
        if preferred and sums[-1] < limit:
            for i in range(len(sums) - 1, -1, -1):
                if sums[i] in preferred:
                    cut = i + 1
                    break
        return keys, sums, cut

    def _should_dispatch(self, keys: list[Key], sums: list[int], cut: int, now_s: float) -> bool:
        taken_rows = sums[cut - 1]
        if taken_rows >= self.limit_rows or taken_rows in self.config.preferred_batch_sizes:
            return True
        if self.config.work_conserving or not self.config.enabled:
            return True
        # The same expression as wake_at_s, so a timer firing at that instant dispatches.
        return now_s >= self._queue[keys[0]].enqueued_s + self.config.max_queue_delay_s
