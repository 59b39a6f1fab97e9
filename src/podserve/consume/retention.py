"""How long results (and the markers that keep them unique) stay in Redis.

The results stream is trimmed by every write (the script in streams.py), two ways:

- **By age, exactly.** Each script call first runs `XTRIM <results> MINID <now - ttl>`,
  with Redis' own clock (`TIME`): no result older than `ttl_s` is left in the stream when
  a new one is written. Exact (`=`), not approximate, on purpose: with `~` Redis removes
  only whole macro nodes (up to `stream-node-max-entries`, 100, entries each), so a quiet
  stream can keep results older than the cutoff for as long as its head node is not full
  of old entries (https://redis.io/docs/latest/commands/xtrim/: "the stream may contain
  entries older than the threshold"), and those results could outlive their markers. When
  nothing is old enough the exact trim looks at the head node's first entry only.
- **By count, approximately.** With `maxlen` > 0, each call ends with
  `XTRIM <results> MAXLEN ~ <maxlen>`: whole macro nodes only, so the stream holds
  `maxlen` results plus at most about one node (https://redis.io/docs/latest/commands/xadd/
  "Capped streams": "~ ... is much more efficient ... the stream will have at least N
  entries, possibly a few tens more"). One trim per call, not per result.

Each result's idempotency marker (`<results>:done:<id>`, written with `SET NX PXAT`)
expires no sooner than `ttl_s` after the result's own entry id (its timestamp, Redis'
clock) and at most a second later: it is set to expire at the call's `TIME` + ttl + 1 s,
the second covering a call slowed down on a loaded Redis (its ids then pass `TIME`); when
the call's last result id is further ahead (a clock stepped back, producers' explicit
ids), `PEXPIREAT` moves every marker of the call to a ttl past that id. So:

    For a request id whose result was written with entry id t, every later entry with
    the same id (a re-delivery after a crash, a claim of an entry that was slow rather
    than dead, a producer re-sending it) written before t + ttl gets no second result:
    it is acknowledged and counted as a duplicate. A result still in the stream when a
    new one is written is younger than ttl (the age trim ran first), so its marker
    exists: the results stream never holds two results for one id.

A result trimmed early by count keeps its marker until t + ttl: a re-sent id then gets
no result at all, so keep `maxlen` above what producers leave unread. After t + ttl
(+ 1 s) both are gone and a re-sent id is a new request. Markers take memory for every result
written in the last `ttl_s` (rate x ttl keys), whatever `maxlen` is.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TTL_S = 24 * 3600
DEFAULT_MAXLEN = 1_000_000


@dataclass(frozen=True, slots=True)
class Retention:
    ttl_s: int = DEFAULT_TTL_S  # results older than this are trimmed; markers live as long
    maxlen: int = DEFAULT_MAXLEN  # approximate cap on the results stream; 0: no cap

    def __post_init__(self) -> None:
        if self.ttl_s < 1:
            raise ValueError("the results TTL must be at least 1 second")
        if self.maxlen < 0:
            raise ValueError("the results maxlen must be 0 (no cap) or more")

    @property
    def ttl_ms(self) -> int:
        return self.ttl_s * 1000
