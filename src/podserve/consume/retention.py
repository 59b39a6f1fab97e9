"""How long the three streams (requests, results, dead letters) and the markers that keep
results unique stay in Redis. Every write script call (streams.py) applies all of it.

The results stream is trimmed two ways:

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

**The request stream** (`delete_acknowledged`): XACK only removes an entry from the
group's pending list; the entry itself stays in the stream for ever. The script XDELs the
entries it acknowledges, in the same call (Redis 8.2's `XACKDEL` does both in one command,
https://redis.io/docs/latest/commands/xackdel/; the Debian redis-server here is 7.0, so
XACK + XDEL). Right for a work queue, whose one group is the stream's only reader: another
group would lose entries it has not read yet, so the script deletes nothing while the
stream has more than one group (a plain XREAD reader it cannot see: keep
`delete_acknowledged` off then). Entries left pending for a retry are not acknowledged and
stay.

One entry is held back: the group's last-delivered entry. KEDA's lagCount reads XINFO
GROUPS' `lag` (kedacore/keda pkg/scalers/redis_streams_scaler.go returns `group.Lag`), and
Redis reports it as NULL whenever the last-delivered entry was deleted while an older entry
is still in the stream and a newer one is waiting (redis/redis src/t_stream.c
`streamCGLag`: the group's read counter is used only if no tombstone lies at or after
last-delivered-id, `streamRangeHasTombstones` being inclusive; the fallback
`streamEstimateDistanceFromFirstEverEntry` gives up when the largest deleted id is past the
first entry). Reproduced on 7.0.15: entries 1-4 read, 2-4 acknowledged and deleted, 1 left
pending, 5 added: `lag` is NULL until the group reads again. go-redis turns that NULL into
-1 (0 in older releases), so KEDA sees no backlog and never wakes a queue scaled to zero.
So the script never deletes the entry equal to the group's last-delivered-id; it keeps
that id in `<stream>:<group>:held` and deletes it in a later call, once the group has read
past it. Every deleted id is then below last-delivered-id, which only grows, and `lag`
stays a number (tests/consume/test_retention.py checks it on a real redis-server). At most
one acknowledged entry per group waits in the stream.

**The dead-letter stream** (`dead_letter_maxlen`): each dead letter is added with
`XADD ... MAXLEN ~ N`: whole nodes only, so N letters and at most about one node (100)
more; 0: no cap. Dead letters wait for an operator, so the cap is generous.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TTL_S = 24 * 3600
DEFAULT_MAXLEN = 1_000_000
DEFAULT_DEAD_LETTER_MAXLEN = 100_000


@dataclass(frozen=True, slots=True)
class Retention:
    ttl_s: int = DEFAULT_TTL_S  # results older than this are trimmed; markers live as long
    maxlen: int = DEFAULT_MAXLEN  # approximate cap on the results stream; 0: no cap
    delete_acknowledged: bool = True  # XDEL request entries once acknowledged
    dead_letter_maxlen: int = DEFAULT_DEAD_LETTER_MAXLEN  # approximate cap; 0: no cap

    def __post_init__(self) -> None:
        if self.ttl_s < 1:
            raise ValueError("the results TTL must be at least 1 second")
        if self.maxlen < 0:
            raise ValueError("the results maxlen must be 0 (no cap) or more")
        if self.dead_letter_maxlen < 0:
            raise ValueError("the dead-letter maxlen must be 0 (no cap) or more")

    @property
    def ttl_ms(self) -> int:
        return self.ttl_s * 1000
