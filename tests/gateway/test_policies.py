"""The gateway's pure cores on synthetic inputs and a fake clock: money, reservations,
windows, routing, retry budget, circuit breaker, metric scraping, SSE relay."""

from __future__ import annotations

from decimal import Decimal

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from podserve.config.gateway_config import GatewayConfig
from podserve.core.clock import FakeClock
from podserve.gateway.breaker import Breaker, BreakerState
from podserve.gateway.budget import (
    Grant,
    HoldPlan,
    Refusal,
    RefusalReason,
    ScopeState,
    Usage,
    WindowState,
    grant,
    plan_hold,
)
from podserve.gateway.limits import window_at
from podserve.gateway.money import Rate, usd_to_micro
from podserve.gateway.retry_budget import RetryBudget
from podserve.gateway.routing import EndpointLoad, Router, Target
from podserve.gateway.scrape import parse_load
from podserve.gateway.sse import EventRelay


def test_money_is_integer_and_rounds_up() -> None:
    rate = Rate.per_million_usd(Decimal("0.075"), Decimal("0.3"))
    assert rate == Rate(75, 300)
    assert rate.cost_micro(1, 0) == 1  # 75 nano rounds up to one micro-dollar
    assert rate.cost_micro(1000, 1000) == 375
    assert usd_to_micro(Decimal("1.5")) == 1_500_000


@given(
    avail=st.integers(0, 10**9),
    prompt=st.integers(0, 10**5),
    inp=st.integers(0, 10**4),
    out=st.integers(1, 10**4),
)
def test_max_output_within_is_the_exact_bound(avail: int, prompt: int, inp: int, out: int) -> None:
    rate = Rate(inp, out)
    n = rate.max_output_within(avail, prompt)
    if n < 0:
        assert rate.cost_micro(prompt, 0) > avail
    else:
        assert rate.cost_micro(prompt, n) <= avail
        assert rate.cost_micro(prompt, n + 1) > avail


scopes = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(0, 10**7)), st.integers(0, 10**6), st.integers(0, 10**6)
    ),
    min_size=1,
    max_size=3,
)


@given(scopes=scopes, prompt=st.integers(0, 5000), cap=st.integers(1, 5000), clamp=st.booleans())
def test_grant_never_exceeds_any_budget(
    scopes: list[tuple[int | None, int, int]], prompt: int, cap: int, clamp: bool
) -> None:
    rate = Rate(1000, 2000)
    states = [ScopeState(f"s{i}", lim, c, r) for i, (lim, c, r) in enumerate(scopes)]
    decision = grant(plan_hold(prompt, cap, 256, clamp, rate), states)
    if isinstance(decision, Grant):
        assert decision.amount_micro == rate.cost_micro(prompt, decision.max_tokens)
        assert 1 <= decision.max_tokens <= cap
        assert clamp or decision.max_tokens == cap
        for s in states:
            assert s.available_micro is None or decision.amount_micro <= s.available_micro
    else:
        assert decision.reason is RefusalReason.BUDGET
        # Refused only when not even the minimum fits one scope.
        minimum = rate.cost_micro(prompt, 1 if clamp else cap)
        assert any(s.available_micro is not None and minimum > s.available_micro for s in states)


def test_windows_refuse_with_time_to_reset() -> None:
    plan = HoldPlan(10, 20, 20, Rate(0, 0))
    assert grant(plan, [], rpm=[WindowState("rpm:k", 5, 4, 12.5)]) == Grant(20, 0, 30)
    refused = grant(plan, [], rpm=[WindowState("rpm:k", 5, 5, 12.5)])
    assert refused == Refusal(RefusalReason.RPM, "rpm:k", 13)
    assert grant(plan, [], tpm=[WindowState("tpm:k", 100, 71, 3)]) == Refusal(
        RefusalReason.TPM, "tpm:k", 3
    )
    # 60 of the 71 held by outstanding reservations: they may give tokens back sooner
    held = grant(plan, [], tpm=[WindowState("tpm:k", 100, 71, 3, held=60)])
    assert held == Refusal(RefusalReason.TPM, "tpm:k", 1, may_fit_later=True)
    window = window_at(120.5)
    assert window.index == 2
    assert window.resets_in_s == 59.5


def _router(**routing: object) -> Router:
    return Router(
        GatewayConfig.model_validate(
            {
                "pools": [
                    {
                        "name": "stable",
                        "models": ["m"],
                        "endpoints": ["http://a", "http://b"],
                        "weight": 95,
                        "maxWaiting": 4,
                    },
                    {"name": "canary", "models": ["m"], "endpoints": ["http://c"], "weight": 5},
                ],
                "fallbacks": [{"name": "hosted", "baseUrl": "http://h/v1", "models": ["m"]}],
                "routing": routing,
            }
        )
    )


def test_weighted_split_is_exact_over_each_cycle() -> None:
    router = _router()
    for ep in ("http://a", "http://b", "http://c"):
        router.update_load(ep, EndpointLoad(ready=True))
    firsts = [router.plan("m", 0.0)[0].upstream for _ in range(2000)]
    assert firsts.count("canary") == 100


def test_least_loaded_ready_pod_first_then_fallback() -> None:
    router = _router()
    router.update_load("http://a", EndpointLoad(ready=True, waiting=3, running=8))
    router.update_load("http://b", EndpointLoad(ready=True, waiting=0, running=2))
    router.update_load("http://c", EndpointLoad(ready=False))
    plan = router.plan("m", 0.0)
    assert [t.base_url for t in plan] == ["http://b", "http://a", "http://h/v1"]
    # Saturated (over maxWaiting) and not-ready pods are skipped: the fallback first, the
    # saturated pod only as a retry.
    router.update_load("http://a", EndpointLoad(ready=True, waiting=9))
    router.update_load("http://b", EndpointLoad(ready=False))
    assert [t.base_url for t in router.plan("m", 0.0)] == ["http://h/v1", "http://a"]
    assert router.plan("unknown", 0.0) == []


def test_a_saturated_pool_never_spills_into_the_canarys_share() -> None:
    router = Router(
        GatewayConfig.model_validate(
            {
                "pools": [
                    {
                        "name": "stable",
                        "models": ["m"],
                        "endpoints": ["http://a"],
                        "weight": 95,
                        "maxWaiting": 4,
                    },
                    {"name": "canary", "models": ["m"], "endpoints": ["http://c"], "weight": 5},
                ],
            }
        )
    )
    router.update_load("http://a", EndpointLoad(ready=True, waiting=50))  # saturated
    router.update_load("http://c", EndpointLoad(ready=True))
    firsts = [router.plan("m", 0.0)[0].upstream for _ in range(200)]
    assert firsts.count("canary") == 10
    router.update_load("http://a", EndpointLoad(ready=False))  # down: then it overflows
    assert router.plan("m", 0.0)[0].upstream == "canary"


def test_saturated_pods_still_serve_when_there_is_no_fallback() -> None:
    router = Router(
        GatewayConfig.model_validate(
            {
                "pools": [
                    {
                        "name": "p",
                        "models": ["m"],
                        "endpoints": ["http://a", "http://b"],
                        "maxWaiting": 4,
                    }
                ],
            }
        )
    )
    router.update_load("http://a", EndpointLoad(ready=True, waiting=9))
    router.update_load("http://b", EndpointLoad(ready=False))
    assert [t.base_url for t in router.plan("m", 0.0)] == ["http://a"]


def _state(breaker: Breaker) -> BreakerState:
    """Read afresh: mypy keeps `breaker.state` narrowed by one assert across the calls
    that change it, and would call the next assert impossible."""
    return breaker.state


def test_breaker_opens_then_lets_one_probe_through() -> None:
    clock = FakeClock()
    breaker = Breaker(failures=3, open_s=10)
    for _ in range(3):
        breaker.on_failure(clock.now_s())
    assert _state(breaker) is BreakerState.OPEN
    assert not breaker.allows(clock.now_s())
    clock.advance(10)
    assert breaker.allows(clock.now_s())
    breaker.on_attempt(clock.now_s())
    assert _state(breaker) is BreakerState.HALF_OPEN
    assert not breaker.allows(clock.now_s())  # only one probe
    breaker.on_failure(clock.now_s())
    assert _state(breaker) is BreakerState.OPEN
    clock.advance(10)
    breaker.on_attempt(clock.now_s())
    breaker.on_success()
    assert _state(breaker) is BreakerState.CLOSED


def test_router_skips_an_endpoint_whose_breaker_is_open() -> None:
    router = _router(breakerFailures=1)
    for ep in ("http://a", "http://b", "http://c"):
        router.update_load(ep, EndpointLoad(ready=True))
    target = router.plan("m", 0.0)[0]
    router.on_start(target, 0.0)
    router.on_finish(target, False, 0.0)
    assert target.base_url not in [t.base_url for t in router.plan("m", 1.0)]


@given(st.lists(st.booleans(), max_size=400))
def test_retries_stay_within_the_budget(failures: list[bool]) -> None:
    budget = RetryBudget(0.2)
    for failed in failures:
        budget.on_request()
        if failed:
            budget.try_retry()
    assert budget.retries * 5 <= budget.requests


PODSERVE_METRICS = """# HELP vllm:num_requests_waiting Requests waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="tiny-lm"} 3.0
vllm:num_requests_running{model_name="tiny-lm"} 7.0
vllm:kv_cache_usage_perc{model_name="tiny-lm"} 0.25
podserve_queue_depth{model="iris"} 2.0
podserve_queue_depth_other{model="x y"} 99.0
podserve_requests_total{model="a b",endpoint="infer",code="200"} 5.0
"""


def test_parse_load_reads_the_four_series() -> None:
    load = parse_load(PODSERVE_METRICS, ready=True)
    assert load == EndpointLoad(ready=True, waiting=5.0, running=7.0, kv_usage=0.25)


def test_relay_strips_the_usage_chunk_and_counts_tokens() -> None:
    stream = (
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":""}}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}\n\n'
        b"data: [DONE]\n\n"
    )
    relay = EventRelay(keep_usage_chunk=False)
    out = b"".join(relay.feed(stream[i : i + 7]) for i in range(0, len(stream), 7))
    out += relay.flush()
    assert b"usage" not in out
    assert out.endswith(b"data: [DONE]\n\n")
    assert relay.tally.tokens_sent == 2
    assert relay.tally.usage is not None
    assert relay.tally.usage.completion_tokens == 2
    kept = EventRelay(keep_usage_chunk=True)
    assert b"usage" in kept.feed(stream)


def _events(*payloads: object, sep: bytes = b"\n\n") -> bytes:
    return b"".join(b"data: " + orjson.dumps(p) + sep for p in payloads)


def test_stream_usage_is_read_as_counts_and_the_largest_is_kept() -> None:
    """A negative count credited the budget; a later chunk of zeros made the request
    free; bools counted as tokens. Usage is read as the non-streamed path reads it."""
    token = {"choices": [{"index": 0, "text": "a"}]}
    for bad in (
        {"prompt_tokens": -1_000_000, "completion_tokens": 2},
        {"prompt_tokens": True, "completion_tokens": True},
        {"prompt_tokens": 2**63 - 1, "completion_tokens": 2},
    ):
        relay = EventRelay(keep_usage_chunk=False)
        relay.feed(_events(token, {"choices": [], "usage": bad}))
        assert relay.tally.usage is None, bad  # unreadable: the hold is charged
    relay = EventRelay(keep_usage_chunk=False)
    relay.feed(
        _events(
            {**token, "usage": {"prompt_tokens": 4, "completion_tokens": 1}},  # cumulative
            {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}},
            {"choices": [], "usage": {"prompt_tokens": 0, "completion_tokens": 0}},
        )
    )
    assert relay.tally.usage == Usage(4, 2)


@pytest.mark.parametrize("sep", [b"\n\n", b"\r\n\r\n", b"\r\r"])
def test_a_burst_of_events_in_one_read_is_relayed_whole(sep: bytes) -> None:
    """20,000 events in one read (a hosted API or a buffering proxy delivers bursts): each
    is relayed and counted, and the usage chunk is found after them."""
    token = {"choices": [{"index": 0, "text": "a"}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 20_000}}
    stream = _events(*([token] * 20_000), usage, sep=sep) + b"data: [DONE]" + sep
    relay = EventRelay(keep_usage_chunk=False)
    out = relay.feed(stream[:-1]) + relay.feed(stream[-1:])  # the last separator split
    assert out == _events(*([token] * 20_000), sep=sep) + b"data: [DONE]" + sep
    assert relay.tally.tokens_sent == 20_000
    assert relay.tally.usage == Usage(3, 20_000)


def test_an_event_end_split_across_reads_is_found() -> None:
    stream = _events({"choices": [{"index": 0, "text": "a"}]}, sep=b"\r\n\r\n")
    for cut in range(1, len(stream)):
        relay = EventRelay(keep_usage_chunk=False)
        assert relay.feed(stream[:cut]) + relay.feed(stream[cut:]) == stream
        assert relay.tally.tokens_sent == 1


def test_round_robin_ignores_load() -> None:
    router = _router(policy="round-robin")
    router.update_load("http://a", EndpointLoad(ready=True, waiting=3, running=8))
    router.update_load("http://b", EndpointLoad(ready=True))
    router.update_load("http://c", EndpointLoad(ready=True))
    stable = [
        t.base_url for t in (router.plan("m", 0.0)[0] for _ in range(40)) if t.upstream == "stable"
    ]
    # Alternating (the canary's picks rank this pool as overflow and move it along too).
    assert abs(stable.count("http://a") - stable.count("http://b")) <= 2


def test_relay_passes_on_what_is_not_an_event_stream() -> None:
    relay = EventRelay(keep_usage_chunk=False)
    blob = b"x" * (1 << 20)
    assert relay.feed(blob) == b""
    assert relay.feed(b"y") == blob + b"y"  # past 1 MiB without an event end: passed on
    assert relay.tally.usage is None


def test_the_gateways_own_requests_count_once_between_and_after_scrapes() -> None:
    """Skew: 16 requests on a, 4 on b from elsewhere. The gateway's next 8 all belong on
    b (4 + 8 = 12 < 16), before a scrape has seen them and after one has."""
    router = _router()
    router.update_load("http://a", EndpointLoad(ready=True, running=16))
    router.update_load("http://b", EndpointLoad(ready=True, running=4))
    router.update_load("http://c", EndpointLoad(ready=False))
    sent = []
    for _ in range(8):
        target = router.plan("m", 0.0)[0]
        router.on_start(target, 0.0)
        sent.append(target.base_url)
    assert sent == ["http://b"] * 8
    assert router.queue("http://b") == 12
    # The next scrape sees the 8 in b's running batch: still 12, not 12 + 8 in flight.
    router.update_load("http://b", EndpointLoad(ready=True, running=12))
    assert router.queue("http://b") == 12
    assert router.plan("m", 0.0)[0].base_url == "http://b"
    # Two of them finish before the next scrape: b's queue drops at once.
    done = Target("stable", "http://b", hosted=False)
    router.on_finish(done, True, 0.0)
    router.on_finish(done, True, 0.0)
    assert router.queue("http://b") == 10


def test_kv_usage_does_not_outweigh_a_queue_difference() -> None:
    """GIE's KV-cache scorer is absolute: a 0.01 difference in usage must not tie a pod
    with 4 more requests queued (min-max normalising both made it a coin toss)."""
    router = _router()
    router.update_load("http://a", EndpointLoad(ready=True, running=16, kv_usage=0.10))
    router.update_load("http://b", EndpointLoad(ready=True, running=12, kv_usage=0.11))
    router.update_load("http://c", EndpointLoad(ready=False))
    # (The canary's picks find it down and overflow into this pool: b first there too.)
    assert [router.plan("m", 0.0)[0].base_url for _ in range(40)] == ["http://b"] * 40
