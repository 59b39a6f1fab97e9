"""Redis Streams I/O for the consumer: the group, reads, claims, and the atomic writes
(a result with its ack; a failed attempt counted; a dead letter with its ack), every
write of one flush in one script call.

Delivery semantics (https://redis.io/docs/latest/develop/data-types/streams/):
- XREADGROUP `>` hands each new entry to one consumer of the group and records it in the
  group's pending entries list (PEL) until XACK.
- XAUTOCLAIM (Redis 6.2+) moves entries idle in another consumer's PEL for longer than
  `min-idle-time` to this consumer: a consumer that died (kill -9, a lost node) leaves its
  entries pending, and whoever claims them runs them again.
- A re-run must not write a second result. The result is XADDed only if the marker key
  `<results>:done:<id>` did not exist (SET NX, with a TTL), and the XACK happens in the
  same Lua script: a crash before the script leaves the entry pending (it runs again), a
  crash after it leaves it answered and acknowledged, and there is no state in between.
- The same script trims the results stream by age and count and expires each marker with
  its result, deletes the request entries it acknowledges (all but the group's
  last-delivered one, which keeps XINFO GROUPS' lag a number) and caps the dead-letter
  stream (retention.py: the guarantees and why, stated exactly).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from podserve.consume.contract import Result, StreamEntry, parse_entry
from podserve.consume.retention import Retention

# Every write of one flush in one script call: one round trip and one script run for the
# batch, each write keeping its own semantics (and the whole batch atomic).
# KEYS: results, requests, failures hash, dead letters, the held-back entry id, then write
#       i's done marker at 5+i
# ARGV: group, retention ttl (ms), results maxlen (0: no cap), delete acknowledged (1/0),
#       dead-letter maxlen (0: no cap), then per write in order
#       'r' (a result): entry id, request id, status, body
#       'f' (a failed attempt): entry id, request id, status, body, max failures, error,
#           model, request body, api
# Returns per write: 1/0 for a result (0: one existed), the failure count for a failed
# attempt, negated when it went to the dead-letter stream.
# Retention (retention.py says why each step is as it is): results older than the ttl go
# first (exact MINID, Redis' clock), each marker expires no sooner than ttl after its
# result's entry id (and at most a second later), and the count cap trims whole nodes
# (MAXLEN ~) once per call.
# Per call, not per write: TIME, both trims, one variadic XACK, HDEL and XDEL for every
# entry answered (each redis.call from Lua costs about a microsecond on its own).
# Deleting acknowledged requests: XACK + XDEL (Redis 8.2's XACKDEL would be one command,
# https://redis.io/docs/latest/commands/xackdel/; Redis 7 has no such command), skipped
# while another group reads the stream, and never the group's last-delivered entry, which
# waits in KEYS[5] for a later call (retention.py: it keeps XINFO GROUPS' lag a number).
_WRITES_LUA = """
local out = {}
local group, ttl, maxlen = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local delete, dead_maxlen = ARGV[4] == '1', tonumber(ARGV[5])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('XTRIM', KEYS[1], 'MINID', string.format('%d', now - ttl))
local expire_at = string.format('%d', now + ttl + 1000)
local acked, marked, last = {}, {}, nil
local a = 6
for i = 1, #KEYS - 5 do
  local failed = ARGV[a] == 'f'
  local entry, rid, status, body = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local count = 0
  if failed then
    count = redis.call('HINCRBY', KEYS[3], entry, 1)
  end
  if failed and count < tonumber(ARGV[a + 5]) then
    out[i] = count
  else
    if failed and dead_maxlen > 0 then
      redis.call('XADD', KEYS[4], 'MAXLEN', '~', dead_maxlen, '*', 'id', rid,
                 'model', ARGV[a + 7], 'body', ARGV[a + 8], 'api', ARGV[a + 9],
                 'entry', entry, 'error', ARGV[a + 6], 'failures', count)
    elseif failed then
      redis.call('XADD', KEYS[4], '*', 'id', rid, 'model', ARGV[a + 7], 'body', ARGV[a + 8],
                 'api', ARGV[a + 9], 'entry', entry, 'error', ARGV[a + 6], 'failures', count)
    end
    local written = 0
    if redis.call('SET', KEYS[5 + i], entry, 'NX', 'PXAT', expire_at) then
      last = redis.call('XADD', KEYS[1], '*', 'id', rid, 'status', status, 'body', body)
      marked[#marked + 1] = KEYS[5 + i]
      written = 1
    end
    acked[#acked + 1] = entry
    if failed then out[i] = -count else out[i] = written end
  end
  if failed then a = a + 10 else a = a + 5 end
end
if #acked > 0 then
  redis.call('XACK', KEYS[2], group, unpack(acked))
  redis.call('HDEL', KEYS[3], unpack(acked))
  local groups = delete and redis.call('XINFO', 'GROUPS', KEYS[2]) or {}
  if #groups == 1 then
    local info, tip = groups[1], nil
    for j = 1, #info - 1, 2 do
      if info[j] == 'last-delivered-id' then tip = info[j + 1] end
    end
    local gone, hold = {}, nil
    for _, entry in ipairs(acked) do
      if entry == tip then hold = entry else gone[#gone + 1] = entry end
    end
    local held = redis.call('GET', KEYS[5])
    if held and held ~= tip then
      gone[#gone + 1] = held
      if not hold then redis.call('DEL', KEYS[5]) end
    end
    if hold then redis.call('SET', KEYS[5], hold) end
    if #gone > 0 then redis.call('XDEL', KEYS[2], unpack(gone)) end
  end
end
if last then
  -- Ids only grow: if the last one is within the second of slack the markers got, none
  -- expires before a ttl after its result's id. A slow call (a loaded Redis) stays well
  -- inside it; ids further ahead (a clock stepped back, explicit ids) move every marker
  -- of the call to a ttl past the last id.
  local ms = tonumber(string.sub(last, 1, string.find(last, '-', 1, true) - 1))
  if ms > now + 1000 then
    for _, key in ipairs(marked) do
      redis.call('PEXPIREAT', key, string.format('%d', ms + ttl))
    end
  end
  if maxlen > 0 then
    redis.call('XTRIM', KEYS[1], 'MAXLEN', '~', maxlen)
  end
end
return out
"""


@dataclass(frozen=True, slots=True)
class StreamNames:
    requests: str
    group: str
    results: str
    dead_letters: str
    consumer: str
    retention: Retention = field(default_factory=Retention)

    @property
    def failures(self) -> str:
        return f"{self.requests}:{self.group}:failures"

    @property
    def held(self) -> str:
        """The acknowledged entry not deleted yet: the group's last-delivered one."""
        return f"{self.requests}:{self.group}:held"

    def done_marker(self, request_id: str) -> str:
        return f"{self.results}:done:{request_id}"


Arg = str | bytes | int


@dataclass(frozen=True, slots=True)
class Write:
    """One entry's outcome to write: its result (`max_failures` None), or a failed attempt
    counted against `max_failures`."""

    entry: StreamEntry
    result: Result
    max_failures: int | None = None


@dataclass(frozen=True, slots=True)
class GroupState:
    pending: int
    lag: int | None  # None: Redis < 7 does not report it (or cannot: retention.py)
    groups: int = 1  # groups reading the stream; above 1 acknowledged entries are kept


class RedisStreams:
    def __init__(self, client: aioredis.Redis, names: StreamNames) -> None:
        self._redis = client
        self.names = names
        self._writes = client.register_script(_WRITES_LUA)
        self._claim_cursor = "0-0"

    async def ensure_group(self) -> None:
        """Create the group (and the stream) if missing; new groups read from the start,
        so entries a producer wrote before the first consumer ever ran are not skipped."""
        try:
            await self._redis.xgroup_create(
                self.names.requests, self.names.group, id="0", mkstream=True
            )
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def read_new(self, count: int, block_ms: int | None) -> list[StreamEntry]:
        """Up to `count` entries never delivered to the group; `block_ms` None: no wait."""
        reply = await self._redis.xreadgroup(
            self.names.group,
            self.names.consumer,
            {self.names.requests: ">"},
            count=count,
            block=block_ms,
        )
        entries: list[StreamEntry] = []
        streams: list[Any] = list(reply or [])  # [[stream name, [(id, fields), ...]]]
        for _stream, items in streams:
            entries.extend(_parse_items(items))
        return entries

    async def claim_idle(self, min_idle_ms: int, count: int) -> list[StreamEntry]:
        """Entries idle in any consumer's PEL for at least `min_idle_ms`, now ours. Walks
        the PEL with a cursor across calls, as XAUTOCLAIM is meant to be used."""
        reply = await self._redis.xautoclaim(
            self.names.requests,
            self.names.group,
            self.names.consumer,
            min_idle_ms,
            start_id=self._claim_cursor,
            count=count,
        )
        cursor: Any = reply[0]
        items: list[Any] = reply[1]
        self._claim_cursor = cursor.decode() if isinstance(cursor, bytes) else str(cursor)
        return _parse_items(items)

    async def touch(self, entry_ids: Sequence[str]) -> None:
        """Reset the idle time of entries this consumer is still working on (XCLAIM to
        itself with min-idle 0 and JUSTID, which leaves the delivery count alone)."""
        if entry_ids:
            await self._redis.xclaim(
                self.names.requests,
                self.names.group,
                self.names.consumer,
                0,
                list(entry_ids),
                justid=True,
            )

    async def write_result(self, entry: StreamEntry, result: Result) -> bool:
        """XADD the result unless one was written for this request id, and XACK the entry,
        atomically. False: a result existed already (a re-run after a crash)."""
        (outcome,) = await self.apply([Write(entry, result)])
        return bool(outcome)

    async def record_failure(self, entry: StreamEntry, result: Result, max_failures: int) -> int:
        """Count a failed attempt. Below `max_failures` the entry stays pending (claimed
        again after the idle timeout) and the count is returned; at `max_failures` it goes
        to the dead-letter stream, its error becomes its result, it is acknowledged, and
        the negated count is returned."""
        (outcome,) = await self.apply([Write(entry, result, max_failures)])
        return outcome

    async def apply(self, writes: Sequence[Write]) -> list[int]:
        """Run every write in one script call: one round trip for all the results a batch
        produced at once. Per write: 1/0 for a result (see write_result), the failure
        count for a failed attempt (see record_failure). Raises the RedisError that kept
        the script from running; then none of the writes happened."""
        if not writes:
            return []
        names = self.names
        keys: list[str] = [
            names.results, names.requests, names.failures, names.dead_letters, names.held
        ]  # fmt: skip
        retention = names.retention
        args: list[Arg] = [names.group, retention.ttl_ms, retention.maxlen]
        args += [int(retention.delete_acknowledged), retention.dead_letter_maxlen]
        for write in writes:
            entry, result = write.entry, write.result
            keys.append(names.done_marker(entry.request_id))
            if write.max_failures is None:
                args += ["r", entry.entry_id, result.request_id, result.status, result.body]
            else:
                args += ["f", entry.entry_id, entry.request_id, result.status, result.body]
                args += [
                    write.max_failures,
                    result.body.decode("utf-8", "replace"),
                    _model_field(entry),
                    entry.body,
                    entry.api.value,
                ]
        # redis-py's Script runs EVALSHA and loads the script on NOSCRIPT (a restarted
        # Redis); a pipeline would instead ask SCRIPT EXISTS on every execute.
        replies: list[Any] = await self._writes(keys=keys, args=args)
        return [int(r) for r in replies]

    async def group_state(self) -> GroupState | None:
        groups: list[dict[str, Any]] = await self._redis.xinfo_groups(self.names.requests)
        for group in groups:
            name = group.get("name")
            if (name.decode() if isinstance(name, bytes) else name) == self.names.group:
                lag = group.get("lag")
                pending = int(group.get("pending", 0))
                return GroupState(pending, None if lag is None else int(lag), len(groups))
        return None


def _model_field(entry: StreamEntry) -> str:
    return f"{entry.model}/{entry.version}" if entry.version else entry.model


def _parse_items(items: Sequence[Any]) -> list[StreamEntry]:
    entries: list[StreamEntry] = []
    for item in items:
        if item is None:  # Redis < 7: an entry deleted while pending
            continue
        raw_id, fields = item
        entry_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
        entries.append(parse_entry(entry_id, fields or {}))
    return entries
