"""A request's prompt tokens, counted without stalling the event loop.

The gateway reserves budget for the prompt before forwarding it, with the model's
tokenizer when the price table names one (`tokens.py`). Tokenizing costs time in
proportion to the text, and the client chooses the text: measured here with tiny-lm's
tokenizer, about 0.23 µs a character, so on the event loop a 1 MB prompt kept the
gateway's `/healthz` from answering for 0.5 s and a 15 MB one for over 5 s (the request
took 9.5 s). The pod learned the same lesson (src/podserve/dataplane/prompts.py).

- A prompt of at most `INLINE_CHARS` characters in at most `INLINE_TEXTS` texts is
  counted on the loop: at ~0.1 ms that is cheaper than handing it to a thread and waking
  the loop again.
- A longer one is counted on the gateway's one counting thread; `TokenizerCount` uses the
  tokenizer call that releases the GIL, so the loop keeps serving meanwhile.
- When the thread already has `MAX_BACKLOG_CHARS` to count (about a second of work), or
  the prompt alone is longer than that, the prompt is counted by its UTF-8 bytes instead:
  a bound that never undercounts (`tokens.ByteBound`), so the budget stays safe. It
  reserves more than the tokens would (about 4x for English), only for this request and
  only until it settles on the upstream's own usage.

Texts the gateway sees again are not counted again. A chat client sends the whole
conversation on every turn, and the same system prompt with every request, so without
this the gateway tokenized a 20-turn conversation's history 20 times over
(`benchmarks/gateway_counting.py`). Each text of `CACHED_TEXT_CHARS` is remembered with
its count, per model, least recently used first out, up to `CACHE_CHARS` characters in
all. Shorter texts are mostly unique and cheap to count. A longer one would push out
hundreds of others and is rarely sent twice, so it is counted each time. The lookups hash
the texts on the event loop: 0.2 ms a MB here (3.2 ms for a 16 MB body of 250 K-character
messages, the `maxBodyBytes` default), against 21 ms for orjson to parse that body.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path

from podserve.config.gateway_config import GatewayConfig
from podserve.gateway import tokens
from podserve.gateway.wire import Billable, Endpoint

INLINE_CHARS = 512
INLINE_TEXTS = 16
MAX_BACKLOG_CHARS = 4_000_000
# What a text costs the tokenizer beyond its characters (an Encoding made and read: about
# 7 us here, some 30 characters' worth), charged to the backlog as characters: 700 K empty
# messages are 0 characters but 10 s of counting and 4 GB, and went inline.
TEXT_COST_CHARS = 32
CACHED_TEXT_CHARS = range(256, 256 * 1024 + 1)
CACHE_CHARS = 4_000_000  # at most 16 MB of text held (4 bytes a character at worst)

BYTES = tokens.ByteBound()


class PromptCounting:
    """Counts prompts for the models with a tokenizer; the byte bound for the rest."""

    def __init__(
        self, counters: Mapping[str, tokens.Counter], cache_chars: int = CACHE_CHARS
    ) -> None:
        self._counters = dict(counters)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._backlog = 0  # characters handed to the thread and not yet counted
        self._cache: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._cache_chars = 0
        self._cache_cap = cache_chars
        self.cache_hits = 0

    @property
    def backlog_chars(self) -> int:
        return self._backlog

    async def prompt_tokens(self, bill: Billable) -> int:
        if not bill.texts and bill.endpoint is not Endpoint.CHAT:
            return bill.token_ids  # nothing to count (an OIP request: 0)
        counted = await self.count(bill.model, bill.texts)
        if bill.endpoint is Endpoint.CHAT:
            return counted + tokens.chat_overhead(len(bill.texts)) + bill.layout_tokens
        return counted + bill.token_ids

    async def count(self, model: str, texts: Sequence[str]) -> int:
        counter = self._counters.get(model)
        if counter is None:
            return BYTES.count(texts)  # O(1) a text for ASCII: never worth a thread
        known = 0
        missing: list[str] = []
        for text in texts:
            found = self._cached(model, text)
            if found is None:
                missing.append(text)
            else:
                known += found
        if not missing:
            return known
        chars = sum(len(t) for t in missing)
        if chars <= INLINE_CHARS and len(missing) <= INLINE_TEXTS:
            return known + self._remember(model, missing, counter.counts(missing))
        chars += TEXT_COST_CHARS * len(missing)
        with self._lock:
            if self._backlog + chars > MAX_BACKLOG_CHARS:
                return known + BYTES.count(missing)
            self._backlog += chars
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="podserve-gw-count"
            )
        loop = asyncio.get_running_loop()
        counts = await loop.run_in_executor(
            self._pool, self._count_off_loop, counter, missing, chars
        )
        return known + self._remember(model, missing, counts)

    def _count_off_loop(
        self, counter: tokens.Counter, texts: Sequence[str], chars: int
    ) -> list[int]:
        # The backlog is released here, on the thread, so a request cancelled while its
        # prompt waits still gives its characters back when the count ends.
        try:
            return counter.counts(texts)
        finally:
            with self._lock:
                self._backlog -= chars

    def _cached(self, model: str, text: str) -> int | None:
        if len(text) not in CACHED_TEXT_CHARS:
            return None
        key = (model, text)
        found = self._cache.get(key)
        if found is not None:
            self._cache.move_to_end(key)
            self.cache_hits += 1
        return found

    def _remember(self, model: str, texts: Sequence[str], counts: Sequence[int]) -> int:
        """Keep the counts of `texts` (the cacheable ones); their sum."""
        for text, count in zip(texts, counts, strict=True):
            if len(text) in CACHED_TEXT_CHARS and (model, text) not in self._cache:
                self._cache[(model, text)] = count
                self._cache_chars += len(text)
        while self._cache_chars > self._cache_cap:
            (_, text), _ = self._cache.popitem(last=False)
            self._cache_chars -= len(text)
        return sum(counts)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def prompt_counters(config: GatewayConfig) -> dict[str, tokens.Counter]:
    """The tokenizer each model's prompts are counted with; a model without one is held
    at the byte bound (counting.py). A fallback that knows the model by another name
    tokenizes it its own way: held at the larger count when the fallback names its
    tokenizer (`fallbacks[].tokenizers`), else at the byte bound, since the prompt is
    counted before the upstream is chosen and the model's own count could be short of
    what the fallback bills (241 tokens held, 540 billed, in a probe)."""
    counters: dict[str, tokens.Counter] = {}
    for model, price in config.prices.items():
        if price.tokenizer is None:
            continue
        found: list[tokens.Counter] = [tokens.TokenizerCount(Path(price.tokenizer))]
        unknown = False
        for fallback in config.fallbacks:
            if model not in fallback.models:
                continue
            if model in fallback.tokenizers:
                found.append(tokens.TokenizerCount(Path(fallback.tokenizers[model])))
            elif model in fallback.upstream_models:
                unknown = True
        if not unknown:
            counters[model] = found[0] if len(found) == 1 else tokens.LargestCount(tuple(found))
    return counters
