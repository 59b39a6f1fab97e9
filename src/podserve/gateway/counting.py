"""A request's prompt tokens, counted without stalling the event loop.

The gateway reserves budget for the prompt before forwarding it, with the model's
tokenizer when the price table names one (`tokens.py`). Tokenizing costs time in
proportion to the text, and the client chooses the text: measured here with tiny-lm's
tokenizer, about 0.23 µs a character, so on the event loop a 1 MB prompt kept the
gateway's `/healthz` from answering for 0.5 s and a 15 MB one for over 5 s (the request
took 9.5 s). The pod learned the same lesson (src/podserve/dataplane/prompts.py).

- A prompt of at most `INLINE_CHARS` characters is counted on the loop: at ~0.1 ms that
  is cheaper than handing it to a thread and waking the loop again.
- A longer one is counted on the gateway's one counting thread; `TokenizerCount` uses the
  tokenizer call that releases the GIL, so the loop keeps serving meanwhile.
- When the thread already has `MAX_BACKLOG_CHARS` to count (about a second of work), or
  the prompt alone is longer than that, the prompt is counted by its UTF-8 bytes instead:
  a bound that never undercounts (`tokens.ByteBound`), so the budget stays safe. It
  reserves more than the tokens would (about 4x for English), only for this request and
  only until it settles on the upstream's own usage.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Mapping, Sequence

from podserve.gateway import tokens
from podserve.gateway.wire import Billable, Endpoint

INLINE_CHARS = 512
MAX_BACKLOG_CHARS = 4_000_000

BYTES = tokens.ByteBound()


class PromptCounting:
    """Counts prompts for the models with a tokenizer; the byte bound for the rest."""

    def __init__(self, counters: Mapping[str, tokens.Counter]) -> None:
        self._counters = dict(counters)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._backlog = 0  # characters handed to the thread and not yet counted

    @property
    def backlog_chars(self) -> int:
        return self._backlog

    async def prompt_tokens(self, bill: Billable) -> int:
        if not bill.texts and bill.endpoint is not Endpoint.CHAT:
            return bill.token_ids  # nothing to count (an OIP request: 0)
        counted = await self.count(bill.model, bill.texts)
        if bill.endpoint is Endpoint.CHAT:
            return counted + tokens.chat_overhead(len(bill.texts))
        return counted + bill.token_ids

    async def count(self, model: str, texts: Sequence[str]) -> int:
        counter = self._counters.get(model)
        if counter is None:
            return BYTES.count(texts)  # O(1) a text for ASCII: never worth a thread
        chars = sum(len(t) for t in texts)
        if chars <= INLINE_CHARS:
            return counter.count(texts)
        with self._lock:
            if self._backlog + chars > MAX_BACKLOG_CHARS:
                return BYTES.count(texts)
            self._backlog += chars
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="podserve-gw-count"
            )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._count_off_loop, counter, texts, chars)

    def _count_off_loop(self, counter: tokens.Counter, texts: Sequence[str], chars: int) -> int:
        # The backlog is released here, on the thread, so a request cancelled while its
        # prompt waits still gives its characters back when the count ends.
        try:
            return counter.count(texts)
        finally:
            with self._lock:
                self._backlog -= chars

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
