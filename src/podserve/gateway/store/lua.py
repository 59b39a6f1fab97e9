"""The Redis scripts: `reserve`, `settle` and `expire` run atomically in Redis, so every
gateway replica sees one set of counters (a script runs alone, redis.io/docs/latest/
develop/interactive/programmability/eval-intro). `reserve` is `budget.grant` line for line;
tests run both stores through the same end-to-end cases to keep them in step.

Lua numbers are doubles: integers stay exact below 2^53, and the largest value here is a
budget in nano-dollars (1e15 for a USD 1M budget). Scope and window keys of a reservation
are read back from its hash: Redis Cluster allows that only because every key of the
gateway carries one hash tag there (`{gw}:`, one slot; redis_postgres.py).

Keys (`gw:` prefix; `{gw}:` on Redis Cluster): `scope:<scope>` hash {c: committed, r:
reserved}; `win:<counter>` integer (a tpm counter with `win:<counter>:held`, what
outstanding holds hold of it); `res:<id>` hash; `leases` sorted set by lease end;
`ledger` list of JSON rows drained into PostgreSQL by one writer (`ledger:writer` its
lock; the `WRITER_*` scripts, ledger_writer.py); `init` set once the committed counters
are there.

A hold of nothing (amount 0, no tokens in a tpm window: every OIP v2 request) gets no
`res:` hash and no `leases` member: RESERVE only checks and counts its windows, and the
replica that made it keeps it in memory and settles it with one RPUSH of its ledger row
(`SETTLE_UNHELD` when it cost something after all). Why, and what a crash loses, is in
`redis_unheld`.
"""

from __future__ import annotations

from typing import Any

from podserve.gateway.budget import (
    Grant,
    Refusal,
    RefusalReason,
    budget_refusal,
    tpm_refusal,
)
from podserve.gateway.store.base import HELD, Hold

# An empty Redis (restarted, flushed) answers 'init': the caller rebuilds the committed
# counters from the ledger first, so a restart cannot hand out a spent budget again.
# ARGV: ns nr nt | prompt maxn minn in_nano out_nano | scope limits (ns; "" = none) |
#       rpm limits (nr) | tpm limits (nt) | res_id lease_until window_ttl labels_json
#       (labels_json "": a hold of nothing, kept by the caller: no res hash, no lease)
# KEYS: scope hashes (ns) | rpm counters (nr) | tpm counters (nt) | res hash | leases | init
RESERVE = """
local HELD = ':held'
if redis.call('EXISTS', KEYS[#KEYS]) == 0 then return {'init', 0, 0} end
local ns, nr, nt = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local prompt, maxn, minn = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local inn, outn = tonumber(ARGV[7]), tonumber(ARGV[8])
local a = 9
for i = 1, nr do
  local used = tonumber(redis.call('GET', KEYS[ns + i]) or '0')
  if used + 1 > tonumber(ARGV[a + ns + i - 1]) then return {'rpm', i, 0} end
end
local n = maxn
for i = 1, nt do
  local used = tonumber(redis.call('GET', KEYS[ns + nr + i]) or '0')
  n = math.min(n, tonumber(ARGV[a + ns + nr + i - 1]) - used - prompt)
  if n < minn then
    return {'tpm', i, tonumber(redis.call('GET', KEYS[ns + nr + i] .. HELD) or '0')}
  end
end
local unspent = {}  -- limit - committed per scope (false: no limit), for fail-open
for i = 1, ns do
  local limit = ARGV[a + i - 1]
  unspent[i] = false
  if limit ~= '' then
    local c = tonumber(redis.call('HGET', KEYS[i], 'c') or '0')
    unspent[i] = tonumber(limit) - c
    local r = tonumber(redis.call('HGET', KEYS[i], 'r') or '0')
    local room = (tonumber(limit) - c - r) * 1000 - prompt * inn
    local m
    if room < 0 then m = -1 elseif outn == 0 then m = maxn else m = math.floor(room / outn) end
    n = math.min(n, m)
    if n < minn then
      -- would it fit were every outstanding hold settled at nothing? (budget.grant)
      local room0 = (tonumber(limit) - c) * 1000 - prompt * inn
      local fits = room0 >= 0 and (outn == 0 or math.floor(room0 / outn) >= minn)
      return {'budget', i, r, fits and 1 or 0}
    end
  end
end
local amount = math.ceil((prompt * inn + n * outn) / 1000)
local b = a + ns + nr + nt
local res_id, lease, ttl, labels = ARGV[b], ARGV[b + 1], tonumber(ARGV[b + 2]), ARGV[b + 3]
-- The caller decided from the plan that no grant can hold anything; checked before any
-- write, so a hold that would hold money can never go without its lease.
if labels == '' and (amount ~= 0 or (nt > 0 and prompt + n ~= 0)) then
  return redis.error_reply('a hold of nothing would hold ' .. amount)
end
if amount ~= 0 then
  for i = 1, ns do redis.call('HINCRBY', KEYS[i], 'r', amount) end
end
for i = 1, nr do
  redis.call('INCR', KEYS[ns + i]); redis.call('EXPIRE', KEYS[ns + i], ttl)
end
for i = 1, nt do
  redis.call('INCRBY', KEYS[ns + nr + i], prompt + n)
  redis.call('EXPIRE', KEYS[ns + nr + i], ttl)
  redis.call('INCRBY', KEYS[ns + nr + i] .. HELD, prompt + n)
  redis.call('EXPIRE', KEYS[ns + nr + i] .. HELD, ttl)
end
if labels == '' then return {'ok', n, amount, unspent} end
local scopes, tpms = {}, {}
for i = 1, ns do scopes[i] = KEYS[i] end
for i = 1, nt do tpms[i] = KEYS[ns + nr + i] end
local res = KEYS[ns + nr + nt + 1]
redis.call('HSET', res, 'scopes', cjson.encode(scopes), 'tpm', cjson.encode(tpms),
  'amount', amount, 'tpm_tokens', prompt + n, 'prompt', prompt, 'maxn', n,
  'labels', labels)
redis.call('ZADD', KEYS[ns + nr + nt + 2], lease, res_id)
return {'ok', n, amount, unspent}
"""

# A settlement: release the hold, commit the cost, return unused tokens to the windows,
# queue the ledger row. KEYS: res hash, leases, ledger list.
# ARGV: res_id cost prompt completion upstream status at
_SETTLE_BODY = """
local HELD = ':held'
local function settle(res, res_id, cost, prompt, completion, upstream, status, at)
  if redis.call('EXISTS', res) == 0 then return 0 end
  local f = redis.call('HMGET', res, 'scopes', 'tpm', 'amount', 'tpm_tokens', 'labels')
  local amount = tonumber(f[3])
  -- 0 - amount, not -amount: Lua's -0 reaches Redis as "-0", which HINCRBY refuses as
  -- not an integer, so a hold of nothing (an OIP request) could never settle.
  for _, key in ipairs(cjson.decode(f[1])) do
    redis.call('HINCRBY', key, 'r', 0 - amount)
    redis.call('HINCRBY', key, 'c', cost)
  end
  local unused = tonumber(f[4]) - prompt - completion
  for _, key in ipairs(cjson.decode(f[2])) do
    if unused > 0 and redis.call('EXISTS', key) == 1 then redis.call('DECRBY', key, unused) end
    -- only while the window lives: a DECRBY on an expired key would make one without a TTL
    if redis.call('EXISTS', key .. HELD) == 1 then redis.call('DECRBY', key .. HELD, f[4]) end
  end
  local row = cjson.decode(f[5])
  row['reservation_id'] = res_id; row['upstream'] = upstream; row['status'] = status
  row['prompt_tokens'] = prompt; row['completion_tokens'] = completion
  row['cost_micro'] = cost; row['at'] = at
  redis.call('RPUSH', KEYS[3], cjson.encode(row))
  redis.call('DEL', res)
  redis.call('ZREM', KEYS[2], res_id)
  return 1
end
"""

SETTLE = (
    _SETTLE_BODY
    + """
return settle(KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]),
  ARGV[5], ARGV[6], ARGV[7])
"""
)

# Charge every reservation whose lease ended in full. KEYS: (unused), leases, ledger.
# ARGV: now res_key_prefix limit
EXPIRE = (
    _SETTLE_BODY
    + """
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0,
  tonumber(ARGV[3]))
for _, id in ipairs(ids) do
  local res = ARGV[2] .. id
  local f = redis.call('HMGET', res, 'amount', 'prompt', 'maxn')
  if f[1] then
    settle(res, id, tonumber(f[1]), tonumber(f[2]), tonumber(f[3]), '', 'expired', ARGV[1])
  else
    redis.call('ZREM', KEYS[2], id)
  end
end
return #ids
"""
)

# A hold of nothing (kept by its replica, no res hash) that cost something after all:
# commit the cost and queue its row in one step. KEYS: ledger, scope hashes...
# ARGV: cost row_json. (One that cost nothing is a plain RPUSH.)
SETTLE_UNHELD = """
for i = 2, #KEYS do redis.call('HINCRBY', KEYS[i], 'c', tonumber(ARGV[1])) end
redis.call('RPUSH', KEYS[1], ARGV[2])
return 1
"""

# A charge recorded after the fact (fail-open spend): once per id. KEYS: marker, ledger.
# ARGV: cost row_json scope keys...
CHARGE = """
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', 604800) == false then return 0 end
for i = 3, #ARGV do redis.call('HINCRBY', ARGV[i], 'c', tonumber(ARGV[1])) end
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1
"""


# A rebuild's result (redis_postgres._bootstrap): the committed counters from the ledger
# and the `init` marker in one step, unless the marker is there already: another
# replica's rebuild finished first, and the requests admitted since have moved the
# counters on. A rebuild whose lock ran out during a slow ledger query wrote its older
# sums over them, handing the spend settled meanwhile out again. Totals stay strings:
# no double rounding.
# KEYS: init, scope hashes. ARGV: their committed totals, in order.
REBUILD = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
for i = 2, #KEYS do redis.call('HSET', KEYS[i], 'c', ARGV[i - 1]) end
redis.call('SET', KEYS[1], '1')
return 1
"""

# The ledger writer's lock (ledger_writer.py). Take it, or keep it, for ARGV[2] ms if it
# is free or already this writer's. KEYS: lock. ARGV: writer id, ttl ms.
WRITER_ACQUIRE = """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
return 1
"""

# Cut a batch the writer has inserted off the queue's head, only while the lock is still
# its own, and keep the lock another ttl. Only the holder trims and rows are only ever
# appended, so a holder's LRANGE still names the head here; once the lock ran out and
# another writer drained (and trimmed) the same rows, a plain LTRIM would cut that many
# rows nobody had inserted. KEYS: lock, ledger. ARGV: writer id, rows inserted, ttl ms.
WRITER_TRIM = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('LTRIM', KEYS[2], tonumber(ARGV[2]), -1)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
"""

# Give the lock back, only if it is still this writer's. KEYS: lock. ARGV: writer id.
WRITER_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
"""


def verdict(hold: Hold, reply: list[Any]) -> Grant | Refusal:
    """RESERVE's reply as `budget.grant` would have answered."""
    plan = hold.plan
    kind = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
    if kind == "ok":
        n, amount = int(reply[1]), int(reply[2])
        unspent = tuple(None if u is None else int(u) for u in reply[3])
        return Grant(n, amount, plan.prompt_tokens + n, unspent)
    index = int(reply[1]) - 1
    if kind == "rpm":
        w = hold.rpm[index]
        return Refusal(RefusalReason.RPM, w.name, max(1, int(-(-w.resets_in_s // 1))))
    if kind == "tpm":
        w = hold.tpm[index]
        return tpm_refusal(w.name, w.resets_in_s, int(reply[2]))
    scope = hold.scopes[index]
    return budget_refusal(scope.name, scope.refills_in_s, int(reply[2]), int(reply[3]) == 1)


# The scripts spell the suffix themselves (Lua, not Python formatting: their braces).
assert all(f"local HELD = '{HELD}'" in script for script in (RESERVE, SETTLE, EXPIRE))
