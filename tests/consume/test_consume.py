"""The consumer in process: a real redis-server, a real data plane over real models."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from podserve.config.settings import ServerSettings
from podserve.consume.consumer import Consumer, ConsumerPolicy
from podserve.consume.contract import Api, StreamEntry, parse_entry
from podserve.consume.metrics import ConsumerMetrics, MetricsListener
from podserve.consume.streams import RedisStreams, StreamNames
from podserve.dataplane.build import build_dataplane
from tests.consume import replies
from tests.consume.conftest import consuming, fresh_names, read_stream
from tests.consume.replies import entries, streams
from tests.support.server import write_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
FAST = ConsumerPolicy(read_count=8, max_inflight=16, block_ms=100, claim_idle_ms=200)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    write_model(
        root,
        "double",
        batching={"max_batch_size": 8},
        parameters={"scale": 2.0, "fail_value": 1313.0},
    )
    shutil.copytree(EXAMPLES / "iris", root / "iris")
    return root


def v2_body(values: list[float]) -> bytes:
    rows = len(values) // 3
    return orjson.dumps(
        {"inputs": [{"name": "x", "shape": [rows, 3], "datatype": "FP32", "data": values}]}
    )


def by_id(results: list[dict[bytes, bytes]]) -> dict[str, dict[bytes, bytes]]:
    return {r[b"id"].decode(): r for r in results}


# -- the contract ----------------------------------------------------------------------


def test_parse_entry_reads_the_contract_fields() -> None:
    entry = parse_entry(
        "1700000000000-3",
        {b"id": b"r1", b"model": b"iris/2", b"body": b"{}", b"api": b"openai.embeddings"},
    )
    assert (entry.request_id, entry.model, entry.version) == ("r1", "iris", "2")
    assert entry.api is Api.OPENAI_EMBEDDINGS
    assert entry.enqueued_ms == 1_700_000_000_000
    assert entry.problem is None


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({b"model": b"m", b"body": b"{}"}, "no 'id'"),
        ({b"id": b"r", b"body": b"{}"}, "no 'model'"),
        ({b"id": b"r", b"model": b"m"}, "no 'body'"),
        ({b"id": b"r", b"model": b"m", b"body": b"{}", b"api": b"grpc"}, "api 'grpc'"),
    ],
)
def test_parse_entry_names_what_breaks_the_contract(fields: dict[bytes, bytes], says: str) -> None:
    problem = parse_entry("1-0", fields).problem
    assert problem is not None
    assert says in problem


# -- through the data plane ------------------------------------------------------------


async def test_every_entry_gets_its_result_and_is_acknowledged(
    redis_url: str, repository: Path, tmp_path: Path
) -> None:
    async with consuming(redis_url, repository, tmp_path / "cache", FAST) as h:
        for i in range(40):
            await h.client.xadd(
                h.names.requests,
                {"id": f"r{i}", "model": "double", "body": v2_body([i, i + 1, i + 2])},
            )
        iris = orjson.dumps(
            {
                "inputs": [
                    {
                        "name": "features",
                        "shape": [1, 4],
                        "datatype": "FP32",
                        "data": [5.1, 3.5, 1.4, 0.2],
                    }
                ]
            }
        )
        await h.client.xadd(h.names.requests, {"id": "iris", "model": "iris", "body": iris})
        results = by_id(await h.results(41))
        for i in range(40):
            result = results[f"r{i}"]
            assert result[b"status"] == b"200"
            body = orjson.loads(result[b"body"])
            assert body["model_name"] == "double"
            assert body["outputs"][0]["data"] == [2 * i, 2 * (i + 1), 2 * (i + 2)]
        assert orjson.loads(results["iris"][b"body"])["outputs"][0]["data"] == [0]  # setosa
        assert await h.client.xpending(h.names.requests, h.names.group) == {
            "pending": 0,
            "min": None,
            "max": None,
            "consumers": [],
        }


async def test_bad_requests_are_answered_with_the_http_status_not_retried(
    redis_url: str, repository: Path, tmp_path: Path
) -> None:
    async with consuming(redis_url, repository, tmp_path / "cache", FAST) as h:
        add = h.client.xadd
        await add(h.names.requests, {"id": "nojson", "model": "double", "body": b"{not json"})
        await add(
            h.names.requests, {"id": "nomodel", "model": "nosuch", "body": v2_body([1, 2, 3])}
        )
        await add(h.names.requests, {"id": "shape", "model": "double", "body": v2_body([1, 2])})
        await add(h.names.requests, {"model": "double", "body": v2_body([1, 2, 3])})
        results = await h.results(4)
        statuses = {r[b"id"].decode(): int(r[b"status"]) for r in results}
        assert statuses["nojson"] == 400
        assert statuses["nomodel"] == 404
        assert statuses["shape"] == 400
        assert [s for i, s in statuses.items() if i not in ("nojson", "nomodel", "shape")] == [400]
        for r in results:
            assert "error" in orjson.loads(r[b"body"])
        assert await h.client.xlen(h.names.dead_letters) == 0


async def test_an_entry_failing_max_times_is_dead_lettered_with_its_error(
    redis_url: str, repository: Path, tmp_path: Path
) -> None:
    policy = ConsumerPolicy(
        read_count=4, max_inflight=8, block_ms=50, claim_idle_ms=50, max_failures=3
    )
    async with consuming(redis_url, repository, tmp_path / "cache", policy) as h:
        await h.client.xadd(
            h.names.requests, {"id": "bad", "model": "double", "body": v2_body([1313, 1, 1])}
        )
        await h.client.xadd(
            h.names.requests, {"id": "good", "model": "double", "body": v2_body([1, 1, 1])}
        )
        dead = await read_stream(h.client, h.names.dead_letters, 1)
        assert dead[0][b"id"] == b"bad"
        assert dead[0][b"failures"] == b"3"
        assert b"refuses the value 1313" in dead[0][b"error"]
        assert dead[0][b"body"] == v2_body([1313, 1, 1])
        results = by_id(await h.results(2))
        assert results["good"][b"status"] == b"200"
        assert results["bad"][b"status"] == b"500"
        assert (await h.client.xpending(h.names.requests, h.names.group))["pending"] == 0
        assert await h.client.hlen(h.names.failures) == 0
    # Counted once the consumer's own tasks are done (leaving `consuming` awaited them).
    assert h.metrics.failed.labels("double")._value.get() == 2
    assert h.metrics.dead_lettered.labels("double")._value.get() == 1


async def test_entries_a_dead_consumer_left_pending_are_claimed_and_answered_once(
    redis_url: str, repository: Path, tmp_path: Path
) -> None:
    names = fresh_names()
    client = redis_url
    import redis.asyncio as aioredis

    ghost = aioredis.Redis.from_url(client)
    try:
        await RedisStreams(ghost, names).ensure_group()
        for i in range(5):
            await ghost.xadd(
                names.requests, {"id": f"r{i}", "model": "double", "body": v2_body([i, i, i])}
            )
        # A consumer that reads and dies before answering: its entries stay pending.
        taken = streams(
            await ghost.xreadgroup(names.group, "ghost", {names.requests: ">"}, count=5)
        )
        assert len(taken[0][1]) == 5
        async with consuming(redis_url, repository, tmp_path / "cache", FAST, names=names) as h:
            results = by_id(await h.results(5))
            assert sorted(results) == [f"r{i}" for i in range(5)]
            assert h.metrics.claimed._value.get() == 5
            # Replaying one answered entry (a re-run after a crash) writes no second result.
            entry_id, fields = taken[0][1][0]
            entry = parse_entry(entry_id.decode(), fields)
            from podserve.consume.contract import Result

            again = Result(entry.request_id, 200, b"{}")
            assert not await RedisStreams(ghost, names).write_result(entry, again)
            assert await h.client.xlen(names.results) == 5
    finally:
        await ghost.aclose()


async def test_stopping_finishes_and_acknowledges_what_was_claimed(
    redis_url: str, repository: Path, tmp_path: Path
) -> None:
    root = repository
    write_model(root, "slow", parameters={"delay_s": 0.2}, batching={"max_batch_size": 4})
    async with consuming(redis_url, root, tmp_path / "cache", FAST) as h:
        for i in range(6):
            await h.client.xadd(
                h.names.requests, {"id": f"s{i}", "model": "slow", "body": v2_body([i, i, i])}
            )
        # Wait until the consumer holds entries (in flight), then stop it.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while h.consumer.inflight == 0:
            assert loop.time() < deadline, "nothing claimed"
            await asyncio.sleep(0.01)
        held = h.consumer.inflight
        scraped = {
            s.name: s.value
            for family in text_string_to_metric_families(h.metrics.exposition().decode())
            for s in family.samples
        }
        assert scraped["podserve_consumer_inflight"] == held  # read at scrape time
        h.consumer.stop()
    # `consuming` waited for run() to return: everything it claimed is answered and acked.
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url)
    try:
        answered = await client.xlen(h.names.results)
        assert answered >= held
        pending = await client.xpending(h.names.requests, h.names.group)
        assert pending["pending"] == 0
    finally:
        await client.aclose()


async def test_metrics_report_lag_pending_processed_and_latency(
    redis_url: str, repository: Path, tmp_path: Path
) -> None:
    policy = ConsumerPolicy(
        read_count=8, max_inflight=16, block_ms=100, claim_idle_ms=200, state_interval_s=0.05
    )
    async with consuming(redis_url, repository, tmp_path / "cache", policy) as h:
        listener = MetricsListener(h.metrics.exposition, "127.0.0.1", 0)
        await listener.start()
        try:
            for i in range(10):
                await h.client.xadd(
                    h.names.requests, {"id": f"m{i}", "model": "double", "body": v2_body([1, 2, 3])}
                )
            await h.results(10)
            # The result is in Redis a moment before the consumer counts it.
            processed = h.metrics.processed.labels("double", "200")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while processed._value.get() < 10:
                assert loop.time() < deadline, "processed_total never reached 10"
                await asyncio.sleep(0.01)
            async with httpx.AsyncClient() as http:
                text = (await http.get(f"http://127.0.0.1:{listener.port}/metrics")).text
                missing = await http.get(f"http://127.0.0.1:{listener.port}/nope")
            assert missing.status_code == 404
        finally:
            await listener.close()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert (
        samples[("podserve_consumer_processed_total", (("code", "200"), ("model", "double")))] == 10
    )
    assert samples[("podserve_consumer_end_to_end_seconds_count", (("model", "double"),))] == 10
    assert ("podserve_consumer_lag", ()) in samples
    assert ("podserve_consumer_pending", ()) in samples


async def test_max_failures_0_retries_for_ever_and_never_dead_letters(
    redis_url: str, repository: Path, tmp_path: Path
) -> None:
    policy = ConsumerPolicy(
        read_count=4, max_inflight=8, block_ms=50, claim_idle_ms=30, max_failures=0
    )
    async with consuming(redis_url, repository, tmp_path / "cache", policy) as h:
        body = v2_body([1313, 1, 1])
        await h.client.xadd(h.names.requests, {"id": "bad", "model": "double", "body": body})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while h.metrics.failed.labels("double")._value.get() < 5:
            assert loop.time() < deadline, "the entry was not retried"
            await asyncio.sleep(0.02)
        assert await h.client.xlen(h.names.dead_letters) == 0
        assert await h.client.xlen(h.names.results) == 0
        assert (await h.client.xpending(h.names.requests, h.names.group))["pending"] == 1


async def test_openai_embeddings_entries_answer_like_v1_embeddings(
    redis_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "models"
    shutil.copytree(EXAMPLES / "minilm", root / "minilm")
    async with consuming(redis_url, root, tmp_path / "cache", FAST) as h:
        body = orjson.dumps({"model": "minilm", "input": ["a queue", "a stream"]})
        await h.client.xadd(
            h.names.requests,
            {"id": "e1", "model": "minilm", "body": body, "api": "openai.embeddings"},
        )
        (result,) = await h.results(1, timeout_s=120)
    assert result[b"status"] == b"200"
    answer = orjson.loads(result[b"body"])
    assert answer["object"] == "list"
    assert [d["index"] for d in answer["data"]] == [0, 1]
    assert len(answer["data"][0]["embedding"]) == 384
    assert answer["usage"]["prompt_tokens"] > 0


async def test_openai_completion_and_chat_entries_answer_like_the_http_edge(
    redis_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "models"
    shutil.copytree(EXAMPLES / "tiny-lm", root / "tiny-lm")
    async with consuming(redis_url, root, tmp_path / "cache", FAST) as h:
        add = h.client.xadd
        completion = {"model": "tiny-lm", "prompt": "def add(a, b):", "max_tokens": 8, "seed": 1}
        chat = {
            "model": "tiny-lm",
            "messages": [{"role": "user", "content": "Return"}],
            "max_tokens": 4,
            "n": 2,
        }
        await add(
            h.names.requests,
            {
                "id": "c",
                "model": "tiny-lm",
                "body": orjson.dumps(completion),
                "api": "openai.completions",
            },
        )
        await add(
            h.names.requests,
            {"id": "chat", "model": "tiny-lm", "body": orjson.dumps(chat), "api": "openai.chat"},
        )
        streamed = {**completion, "stream": True}
        await add(
            h.names.requests,
            {
                "id": "s",
                "model": "tiny-lm",
                "body": orjson.dumps(streamed),
                "api": "openai.completions",
            },
        )
        results = by_id(await h.results(3, timeout_s=120))
    assert results["c"][b"status"] == b"200", results["c"][b"body"]
    body = orjson.loads(results["c"][b"body"])
    assert body["object"] == "text_completion"
    assert body["choices"][0]["finish_reason"] in ("stop", "length")
    assert 0 < body["usage"]["completion_tokens"] <= 8
    answer = orjson.loads(results["chat"][b"body"])
    assert answer["object"] == "chat.completion"
    assert [c["index"] for c in answer["choices"]] == [0, 1]
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert results["s"][b"status"] == b"400"
    assert b"stream" in results["s"][b"body"]


async def test_entries_in_flight_longer_than_the_idle_timeout_are_not_claimed(
    redis_url: str, repository: Path, tmp_path: Path
) -> None:
    """A model slower than --claim-idle-ms: the consumer keeps its entries' idle time
    fresh (XCLAIM JUSTID to itself), so nobody claims and re-runs them."""
    write_model(repository, "slower", parameters={"delay_s": 1.5}, batching={"max_batch_size": 4})
    policy = ConsumerPolicy(read_count=4, max_inflight=8, block_ms=50, claim_idle_ms=600)
    async with consuming(redis_url, repository, tmp_path / "cache", policy) as h:
        for i in range(4):
            body = v2_body([i, i, i])
            await h.client.xadd(h.names.requests, {"id": f"s{i}", "model": "slower", "body": body})
        results = await h.results(4)
    assert sorted(r[b"id"] for r in results) == [b"s0", b"s1", b"s2", b"s3"]
    assert h.metrics.claimed._value.get() == 0
    assert h.metrics.duplicates._value.get() == 0


async def test_one_flush_writes_results_failures_and_dead_letters_each_as_alone(
    redis_url: str,
) -> None:
    """A flush is one script call for every write in it; each write keeps its own
    meaning: a result once per id, a failure counted, a dead letter at the limit."""
    import redis.asyncio as aioredis

    from podserve.consume.contract import Result
    from podserve.consume.streams import Write

    names = fresh_names()
    client = aioredis.Redis.from_url(redis_url)
    try:
        streams = RedisStreams(client, names)
        await streams.ensure_group()
        for rid in ("ok", "again", "flaky", "doomed"):
            await client.xadd(names.requests, {"id": rid, "model": "m/2", "body": b"{}"})
        await client.xadd(names.requests, {"id": "ok", "model": "m", "body": b"{}"})
        read = await streams.read_new(10, 100)
        ok, again, flaky, doomed, ok_twice = read
        await client.hset(names.failures, doomed.entry_id, 1)  # failed once before
        boom = Result("x", 500, b'{"error": "boom"}')
        outcomes = await streams.apply(
            [
                Write(ok, Result("ok", 200, b'{"a": 1}')),
                Write(again, Result("again", 200, b"{}")),
                Write(flaky, boom, 3),
                Write(doomed, boom, 2),
                Write(ok_twice, Result("ok", 200, b'{"a": 2}')),  # same id: not written
            ]
        )
        assert outcomes == [1, 1, 1, -2, 0]
        results = [f for _id, f in entries(await client.xrange(names.results))]
        assert [(r[b"id"], r[b"status"]) for r in results] == [
            (b"ok", b"200"),
            (b"again", b"200"),
            (b"doomed", b"500"),
        ]
        assert results[0][b"body"] == b'{"a": 1}'
        dead = [f for _id, f in entries(await client.xrange(names.dead_letters))]
        assert len(dead) == 1
        assert (dead[0][b"id"], dead[0][b"model"], dead[0][b"failures"]) == (
            b"doomed",
            b"m/2",
            b"2",
        )
        assert dead[0][b"error"] == b'{"error": "boom"}'
        # Only the failure below its limit stays pending, with its count kept.
        pending = replies.pending(
            await client.xpending_range(names.requests, names.group, "-", "+", 10)
        )
        assert [p["message_id"].decode() for p in pending] == [flaky.entry_id]
        assert await client.hgetall(names.failures) == {flaky.entry_id.encode(): b"1"}
        assert await streams.apply([]) == []
        # A restarted Redis has lost the script: the call loads it again (NOSCRIPT).
        await client.script_flush()
        assert await streams.apply([Write(flaky, Result("flaky", 200, b"{}"))]) == [1]
        assert await client.hlen(names.failures) == 0
    finally:
        await client.aclose()


class _WaveStreams(RedisStreams):
    """Real streams, with one wave of producers simulated: once armed, the next blocked
    read is answered with what was there (Redis answers a blocked XREADGROUP after the
    first XADD of a wave), and the rest of the wave lands right after, while the reply
    is on its way."""

    def __init__(self, client: aioredis.Redis, names: StreamNames) -> None:
        super().__init__(client, names)
        self.rest: list[bytes] = []

    async def read_new(self, count: int, block_ms: int | None) -> list[StreamEntry]:
        got = await super().read_new(count, block_ms)
        if got and block_ms is not None and self.rest:
            rest, self.rest = self.rest, []
            for body in rest:
                fields = {b"id": body, b"model": b"double", b"body": v2_body([1, 2, 3])}
                await self._redis.xadd(self.names.requests, fields)  # type: ignore[arg-type]
        return got


class _RecordingConsumer(Consumer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started: list[list[str]] = []

    def _start(self, entries: list[StreamEntry]) -> None:
        if entries:
            self.started.append([e.request_id for e in entries])
        super()._start(entries)


async def test_the_rest_of_a_wave_starts_with_its_first_entry_while_busy(
    redis_url: str, repository: Path, tmp_path: Path
) -> None:
    """While entries are in flight, a blocked read that returns early (the first XADD of a
    wave) is followed by one read without BLOCK, and the wave's entries start together,
    so the model can batch them, as the HTTP edge batches requests that arrive together.
    An idle consumer starts a lone entry at once."""
    write_model(repository, "slow", parameters={"delay_s": 0.5}, batching={"max_batch_size": 4})
    settings = ServerSettings.build(
        {"model_repository": repository, "cache_dir": tmp_path / "cache", "models": []}, None
    )
    dataplane = build_dataplane(settings, asyncio.get_running_loop())
    await dataplane.load_preloaded()
    client = aioredis.Redis.from_url(redis_url)
    names = fresh_names()
    streams = _WaveStreams(client, names)
    consumer = _RecordingConsumer(
        dataplane, streams, FAST, ConsumerMetrics(names.requests, names.group)
    )
    task = asyncio.ensure_future(consumer.run())
    try:
        await client.xadd(
            names.requests, {"id": "lone", "model": "slow", "body": v2_body([1, 1, 1])}
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while consumer.inflight == 0:  # busy with the slow entry
            assert loop.time() < deadline, "nothing claimed"
            await asyncio.sleep(0.01)
        streams.rest = [f"w{i}".encode() for i in range(1, 8)]
        await client.xadd(
            names.requests, {"id": "w0", "model": "double", "body": v2_body([1, 2, 3])}
        )
        await read_stream(client, names.results, 9)
    finally:
        consumer.stop()
        await task
        dataplane.stop()
        await dataplane.close()
        await client.aclose()
    assert consumer.started == [["lone"], [f"w{i}" for i in range(8)]]
