"""Retention of the results stream, against a real redis-server: trimmed by age (exactly,
before each write) and by count (approximately), with each idempotency marker living as
long as its result may (consume/retention.py states the guarantee these tests check)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import orjson
import pytest
import redis.asyncio as aioredis
from redis.typing import EncodableT, FieldT

from podserve.consume.consumer import ConsumerPolicy
from podserve.consume.contract import Result
from podserve.consume.retention import Retention
from podserve.consume.streams import RedisStreams, Write
from tests.consume.conftest import consuming, fresh_names
from tests.consume.replies import entries, streams
from tests.support.server import write_model

HOUR_MS = 3_600_000


async def redis_now_ms(client: aioredis.Redis) -> int:
    seconds, micros = await client.time()
    return seconds * 1000 + micros // 1000


async def expire_time_ms(client: aioredis.Redis, key: str) -> int:
    """PEXPIRETIME (Redis 7), which redis-py's asyncio client has no typed method for."""
    return cast(int, await client.execute_command("PEXPIRETIME", key))  # type: ignore[no-untyped-call]


async def result_ids(client: aioredis.Redis, stream: str) -> list[bytes]:
    return [fields[b"id"] for _id, fields in entries(await client.xrange(stream))]


def test_retention_refuses_impossible_values() -> None:
    with pytest.raises(ValueError, match="at least 1 second"):
        Retention(ttl_s=0)
    with pytest.raises(ValueError, match="0 \\(no cap\\) or more"):
        Retention(maxlen=-1)


async def test_a_result_past_the_ttl_is_trimmed_before_its_id_is_answered_again(
    client: aioredis.Redis,
) -> None:
    """The marker of a result older than the TTL has expired: a re-delivered entry with
    that id is answered again, and the old result is gone first, so the stream never
    holds two results for one id. The old result shares a macro node with the newer
    ones: only an exact trim removes it (`MINID ~` would keep the node whole)."""
    names = fresh_names(retention=Retention(ttl_s=3600, maxlen=0))
    rs = RedisStreams(client, names)
    await rs.ensure_group()
    now = await redis_now_ms(client)
    old: dict[FieldT, EncodableT] = {"id": "again", "status": "200", "body": "{}"}
    await client.xadd(names.results, old, id=f"{now - HOUR_MS - 5000}-0")  # its marker expired
    await client.xadd(names.results, {**old, "id": "kept"}, id=f"{now - 60_000}-0")
    await client.set(names.done_marker("kept"), "1-0", px=HOUR_MS - 60_000)
    for rid in ("again", "kept"):
        await client.xadd(names.requests, {"id": rid, "model": "m", "body": b"{}"})
    again, kept = await rs.read_new(10, 100)
    outcomes = await rs.apply(
        [Write(again, Result("again", 200, b'{"n": 2}')), Write(kept, Result("kept", 200, b"{}"))]
    )
    assert outcomes == [1, 0]  # answered again; a duplicate inside the window is not
    assert await result_ids(client, names.results) == [b"kept", b"again"]
    assert (await client.xpending(names.requests, names.group))["pending"] == 0


async def test_each_marker_expires_a_ttl_after_its_results_entry_id(
    client: aioredis.Redis,
) -> None:
    names = fresh_names(retention=Retention(ttl_s=600, maxlen=0))
    rs = RedisStreams(client, names)
    await rs.ensure_group()
    for rid in ("now", "ahead"):
        await client.xadd(names.requests, {"id": rid, "model": "m", "body": b"{}"})
    first, second = await rs.read_new(10, 100)
    assert await rs.apply([Write(first, Result("now", 200, b"{}"))]) == [1]
    (written,) = entries(await client.xrange(names.results))
    written_ms = int(written[0].split(b"-")[0])
    expires = await expire_time_ms(client, names.done_marker("now"))
    # The call's TIME + ttl + 1 s of slack for a slow call: a ttl after the id, at most
    # a second more.
    assert written_ms + 600_000 <= expires <= written_ms + 600_000 + 1000
    # A stream whose ids run ahead of the clock (a clock stepped back, explicit ids): the
    # result gets an id in the future, and its marker lives a TTL past that id.
    ahead_ms = await redis_now_ms(client) + HOUR_MS
    await client.xadd(names.results, {"id": "x", "status": "200", "body": "{}"}, id=f"{ahead_ms}-0")
    assert await rs.apply([Write(second, Result("ahead", 200, b"{}"))]) == [1]
    last = entries(await client.xrevrange(names.results, count=1))[0][0]
    assert last == f"{ahead_ms}-1".encode()
    expires = await expire_time_ms(client, names.done_marker("ahead"))
    assert expires == ahead_ms + 600_000


async def test_the_count_cap_bounds_the_stream_and_repeats_stay_unanswered(
    redis_url: str, client: aioredis.Redis, tmp_path: Path
) -> None:
    """1,500 requests through a consumer capped at 100 results: the stream never holds
    much more than 100 (at most one macro node, 100 entries, over); every request gets
    one result; ids sent again, whether their result is still in the stream or already
    trimmed by count, get none (their markers live for the TTL)."""
    root = tmp_path / "models"
    write_model(root, "double", batching={"max_batch_size": 16})
    policy = ConsumerPolicy(read_count=16, max_inflight=32, block_ms=100, claim_idle_ms=5000)
    names = fresh_names(retention=Retention(ttl_s=3600, maxlen=100))
    body = orjson.dumps({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32",
                                     "data": [1, 2, 3]}]})  # fmt: skip
    seen: list[bytes] = []
    lengths: list[int] = []
    async with consuming(redis_url, root, tmp_path / "cache", policy, names=names) as h:
        last = "0-0"

        async def send_and_read(ids: list[str], answers: int) -> None:
            nonlocal last
            for rid in ids:
                await h.client.xadd(names.requests, {"id": rid, "model": "double", "body": body})
            got = 0
            while got < answers:
                reply = streams(await h.client.xread({names.results: last}, block=10_000))
                assert reply, f"{got} of {answers} results after 10 s"
                for entry_id, fields in reply[0][1]:
                    last = entry_id.decode()
                    seen.append(fields[b"id"])
                    got += 1
            lengths.append(await h.client.xlen(names.results))

        for chunk in range(30):
            await send_and_read([f"r{chunk}-{i}" for i in range(50)], 50)
        # Sent again: 50 whose results are still in the stream, 50 trimmed long ago; then
        # 50 new ids, read in order after the repeats, so the repeats were all read.
        repeats = [f"r29-{i}" for i in range(50)] + [f"r0-{i}" for i in range(50)]
        await send_and_read([*repeats, *(f"new-{i}" for i in range(50))], 50)
    # Leaving `consuming` let every entry read finish: the repeats are all answered.
    assert len(seen) == len(set(seen)) == 1550
    assert h.metrics.duplicates._value.get() == 100
    assert max(lengths) < 200, lengths  # 100 and at most one node more
    assert lengths[-1] >= 100, lengths
    assert b"r0-0" not in await result_ids(client, names.results)  # trimmed by count ...
    assert await client.exists(names.done_marker("r0-0")) == 1  # ... its marker kept


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("--results-maxlen", "0 (no cap) or more"),
        ("--results-ttl-s", "1 second"),
        ("--dead-letter-maxlen", "dead-letter maxlen must be 0 (no cap) or more"),
    ],
)
def test_the_cli_refuses_impossible_retention(
    flag: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from podserve.cli.main import main

    iris = Path(__file__).resolve().parents[2] / "examples" / "models" / "iris"
    argv = ["consume", "--redis", "redis://127.0.0.1:1/0", "--stream", "s", "--group", "g"]
    argv += ["--results-stream", "r", "--model", f"iris={iris}", flag, "-1"]
    assert main(argv) == 2
    assert says in capsys.readouterr().err
