"""Retention of the request and dead-letter streams, against a real redis-server:
acknowledged requests are deleted by the write script (all but the group's last-delivered
entry, held back so XINFO GROUPS' lag stays a number, as KEDA's lagCount needs), nothing is
deleted while another group reads the stream or with delete_acknowledged off, and the
dead-letter stream is capped (consume/retention.py says why each is as it is)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import orjson
import pytest
import redis.asyncio as aioredis
from redis.typing import EncodableT, FieldT

from podserve.consume.consumer import ConsumerPolicy
from podserve.consume.contract import Result, StreamEntry
from podserve.consume.retention import Retention
from podserve.consume.streams import RedisStreams, StreamNames, Write
from tests.consume.conftest import consuming, fresh_names
from tests.consume.replies import entries, streams
from tests.support.server import write_model


async def group_info(client: aioredis.Redis, names: StreamNames) -> dict[str, Any]:
    (info,) = [
        g for g in await client.xinfo_groups(names.requests) if g["name"] == names.group.encode()
    ]
    return dict(info)


async def produce(client: aioredis.Redis, names: StreamNames, ids: list[str]) -> list[bytes]:
    added: list[bytes] = []
    for rid in ids:
        entry_id = await client.xadd(names.requests, {"id": rid, "model": "m", "body": b"{}"})
        added.append(cast(bytes, entry_id))  # the tests' client does not decode (replies.py)
    return added


def answered(entry: StreamEntry) -> Write:
    return Write(entry, Result(entry.request_id, 200, b"{}"))


async def test_deleting_the_last_delivered_entry_nulls_the_lag_on_this_redis(
    client: aioredis.Redis,
) -> None:
    """Why the script holds one entry back (retention.py): with an older entry still in the
    stream, deleting the group's last-delivered entry leaves `lag` NULL once a new entry
    arrives, until the group reads again. This checks the finding on the Redis the tests
    run, with plain commands."""
    names = fresh_names()
    await RedisStreams(client, names).ensure_group()
    ids = await produce(client, names, ["1", "2", "3", "4"])
    await client.xreadgroup(names.group, "c", {names.requests: ">"}, count=4)
    await client.xack(names.requests, names.group, *ids[1:])
    await client.xdel(names.requests, *ids[1:3])  # below last-delivered: harmless
    await produce(client, names, ["5"])
    assert (await group_info(client, names))["lag"] == 1
    await client.xdel(names.requests, ids[3])  # the last-delivered entry itself
    assert (await group_info(client, names))["lag"] is None


async def test_the_script_deletes_acknowledged_entries_and_the_lag_stays_a_number(
    client: aioredis.Redis,
) -> None:
    """The same sequence through the write script: entries 2-4 answered while 1 waits for a
    retry, then 5 arrives. The lag is a number at every step; 4 (last-delivered) is held
    back and deleted by a later call once the group has read past it."""
    names = fresh_names()
    rs = RedisStreams(client, names)
    await rs.ensure_group()
    await produce(client, names, ["1", "2", "3", "4"])
    first, *rest = await rs.read_new(10, None)
    assert await rs.apply([answered(e) for e in rest]) == [1, 1, 1]
    await produce(client, names, ["5"])
    info = await group_info(client, names)
    assert (info["lag"], info["pending"]) == (1, 1)
    remaining = [fields[b"id"] for _id, fields in entries(await client.xrange(names.requests))]
    assert remaining == [b"1", b"4", b"5"]  # 4: the last-delivered entry, held back
    assert await client.get(names.held) == rest[-1].entry_id.encode()

    (fifth,) = await rs.read_new(10, None)
    assert (await group_info(client, names))["lag"] == 0
    assert await rs.apply([answered(first), answered(fifth)]) == [1, 1]
    remaining = [fields[b"id"] for _id, fields in entries(await client.xrange(names.requests))]
    assert remaining == [b"5"]  # 1 and the held 4 deleted; 5 is now last-delivered
    await produce(client, names, ["6"])
    info = await group_info(client, names)
    assert (info["lag"], info["pending"]) == (1, 0)
    # The group still reads on from there, and the held entry goes with the next call.
    (sixth,) = await rs.read_new(10, None)
    assert await rs.apply([answered(sixth)]) == [1]
    assert [f[b"id"] for _i, f in entries(await client.xrange(names.requests))] == [b"6"]
    assert await client.get(names.held) == sixth.entry_id.encode()


async def test_nothing_is_deleted_while_another_group_reads_or_when_kept(
    client: aioredis.Redis,
) -> None:
    shared = fresh_names()
    rs = RedisStreams(client, shared)
    await rs.ensure_group()
    await client.xgroup_create(shared.requests, "audit", id="0")
    await produce(client, shared, ["a", "b", "c"])
    assert await rs.apply([answered(e) for e in await rs.read_new(10, None)]) == [1, 1, 1]
    assert await client.xlen(shared.requests) == 3
    # The other group still gets every entry.
    reply = streams(await client.xreadgroup("audit", "x", {shared.requests: ">"}, count=10))
    assert [fields[b"id"] for _id, fields in reply[0][1]] == [b"a", b"b", b"c"]

    kept = fresh_names(retention=Retention(delete_acknowledged=False))
    rs = RedisStreams(client, kept)
    await rs.ensure_group()
    await produce(client, kept, ["a", "b", "c"])
    assert await rs.apply([answered(e) for e in await rs.read_new(10, None)]) == [1, 1, 1]
    assert await client.xlen(kept.requests) == 3
    assert (await client.xpending(kept.requests, kept.group))["pending"] == 0


@pytest.mark.parametrize(("cap", "most"), [(10, 150), (0, 300)])
async def test_the_dead_letter_stream_is_capped_approximately(
    client: aioredis.Redis, cap: int, most: int
) -> None:
    """300 entries dead-lettered (one failure allowed each), 30 per script call: capped at
    10, the stream keeps whole nodes of up to 100 letters, so 10 and at most a node more;
    with 0, all 300. The dead-lettered requests are deleted from the request stream."""
    names = fresh_names(retention=Retention(dead_letter_maxlen=cap))
    rs = RedisStreams(client, names)
    await rs.ensure_group()
    await produce(client, names, [f"r{i}" for i in range(300)])
    read = await rs.read_new(300, None)
    for start in range(0, 300, 30):
        writes = [Write(e, Result(e.request_id, 500, b"{}"), 1) for e in read[start : start + 30]]
        assert await rs.apply(writes) == [-1] * 30
    length = await client.xlen(names.dead_letters)
    assert cap <= length <= most
    if cap == 0:
        assert length == 300
    assert await client.xlen(names.requests) == 1  # the held last-delivered entry


async def test_a_thousand_entries_leave_the_request_stream_bounded_and_the_lag_valid(
    redis_url: str, client: aioredis.Redis, tmp_path: Path
) -> None:
    """1,000 entries through a consumer, one in 50 failing twice and then dead-lettered (so
    an older entry waits for its retry while newer ones are acknowledged and deleted: the
    case that nulls the lag if the last-delivered entry is deleted). After every entry
    produced and every burst of 50 answered the lag is a number; once a burst is answered
    the request stream holds only the held entry, and every id has exactly one result."""
    root = tmp_path / "models"
    write_model(
        root,
        "double",
        batching={"max_batch_size": 16},
        parameters={"scale": 2.0, "fail_value": 1313.0},
    )
    policy = ConsumerPolicy(
        read_count=16, max_inflight=32, block_ms=50, claim_idle_ms=100, max_failures=2
    )
    names = fresh_names()

    def body(first: float) -> bytes:
        return orjson.dumps(
            {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [first, 2, 3]}]}
        )

    lags: list[object] = []
    lengths: list[int] = []
    seen: list[bytes] = []
    async with consuming(redis_url, root, tmp_path / "cache", policy, names=names) as h:
        last = "0-0"
        for burst in range(20):
            for i in range(50):
                rid = f"b{burst}-{i}"
                entry: dict[FieldT, EncodableT] = {"id": rid, "model": "double"}
                entry["body"] = body(1313 if i == 7 else 1)
                await h.client.xadd(names.requests, entry)
                lags.append((await group_info(client, names))["lag"])
            got = 0
            while got < 50:
                reply = streams(await h.client.xread({names.results: last}, block=10_000))
                assert reply, f"burst {burst}: {got} of 50 results after 10 s"
                for entry_id, fields in reply[0][1]:
                    last = entry_id.decode()
                    seen.append(fields[b"id"])
                    got += 1
            lags.append((await group_info(client, names))["lag"])
            lengths.append(await client.xlen(names.requests))
    assert all(isinstance(lag, int) for lag in lags), lags
    assert len(seen) == len(set(seen)) == 1000
    assert lengths == [1] * 20, lengths  # the last-delivered entry, held back
    assert await client.xlen(names.dead_letters) == 20
    assert (await client.xpending(names.requests, names.group))["pending"] == 0
