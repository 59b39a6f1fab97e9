"""The gauges that mirror state are read at scrape time by one collector: through the
real data plane, scraped with Prometheus's own parser."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from podserve.core.tensors import Datatype, InferRequest, Tensor
from podserve.dataplane import CallContext, DataPlane
from tests.middle.conftest import gate, metric


def families(plane: DataPlane) -> dict[str, str]:
    text, _ = plane.metrics_exposition()
    return {f.name: f.type for f in text_string_to_metric_families(text.decode())}


def request(model: str) -> InferRequest:
    x = Tensor("x", Datatype.FP32, np.ones((1, 3), dtype=np.float32))
    return InferRequest(model_name=model, inputs=(x,))


async def test_state_gauges_follow_the_state_with_no_work_on_the_request_path(
    plane: DataPlane,
) -> None:
    assert metric(plane, "podserve_ready", {}) == 1
    assert metric(plane, "podserve_draining", {}) == 0
    assert metric(plane, "podserve_model_loaded", {"model": "double", "version": "1"}) == 1
    assert metric(plane, "podserve_inflight_requests", {"model": "gated"}) == 0
    g = gate("gated")
    g.open.clear()
    busy = asyncio.ensure_future(plane.infer(request("gated"), CallContext(endpoint="test")))
    await asyncio.to_thread(g.entered.wait, 10)
    assert metric(plane, "podserve_inflight_requests", {"model": "gated"}) == 1
    g.open.set()
    await busy
    assert metric(plane, "podserve_inflight_requests", {"model": "gated"}) == 0
    await plane.unload_model("double")
    assert metric(plane, "podserve_model_loaded", {"model": "double", "version": "1"}) == 0
    assert metric(plane, "podserve_queue_depth", {"model": "double"}) is None  # not loaded
    plane.begin_drain()
    assert metric(plane, "podserve_ready", {}) == 0
    assert metric(plane, "podserve_draining", {}) == 1


def test_preemptions_are_a_counter_and_the_vllm_aliases_are_gauges(plane: DataPlane) -> None:
    kinds = families(plane)
    assert kinds["podserve_num_preemptions"] == "counter"  # exposed as ..._total
    for name in (
        "podserve_num_requests_running",
        "podserve_kv_cache_usage_ratio",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
    ):
        assert kinds[name] == "gauge", name


@pytest.mark.parametrize("name", ["podserve_requests", "podserve_rejected_requests"])
def test_counters_keep_their_names(plane: DataPlane, name: str) -> None:
    assert families(plane)[name] == "counter"
