"""Requests that arrive together while others are in flight share one model call: the
worker's pump waits for the end of the loop's turn (engine/turn_coalescing.py). A lone
request is still dispatched at once.

In process, with the real ModelWorker and event loop; the model holds each call at a
gate the test opens, so the order of events is set by the test, never by timing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from podserve.config.model_config import load_model_config
from podserve.core.clock import FakeClock
from podserve.engine.model_worker import ModelWorker, WorkerLimits
from podserve.obs.metrics import Metrics
from tests.engine.test_staging import GateModel, request, started
from tests.support.server import write_model


def make_worker(tmp_path: Path, max_queue: int = 16) -> tuple[ModelWorker, GateModel]:
    """Two instances, work-conserving batches of up to 4 rows."""
    directory = write_model(
        tmp_path, "m", batching={"max_batch_size": 4}, instance_count=2, warmup=False
    )
    model = GateModel()
    worker = ModelWorker(
        config=load_model_config(directory),
        model=model,
        limits=WorkerLimits(max_queue=max_queue, max_batch_time_s=30),
        metrics=Metrics().for_model("m"),
        clock=FakeClock(),
        loop=asyncio.get_running_loop(),
    )
    return worker, model


async def test_a_lone_request_is_dispatched_before_the_turn_ends(tmp_path: Path) -> None:
    worker, model = make_worker(tmp_path)
    task = asyncio.ensure_future(worker.infer(request(1.0)))
    await asyncio.sleep(0)  # one turn: the request's step runs, and nothing after it
    assert worker.queue_depth == 0  # handed to a thread inside infer(), not a turn later
    await started(model.starts[0])
    model.release.set()
    response = await task
    assert response.outputs[0].data.tolist() == [[2.0] * 3]
    worker.close()


async def test_requests_arriving_together_share_one_call(tmp_path: Path) -> None:
    worker, model = make_worker(tmp_path)
    first = asyncio.ensure_future(worker.infer(request(0.0)))
    await started(model.starts[0])  # alone: one row, on the first instance
    # Three in one turn while the second instance is idle: dispatched at once, the first
    # of them would have gone alone and the other two waited for a completion.
    together = [asyncio.ensure_future(worker.infer(request(float(i)))) for i in (1, 2, 3)]
    await started(model.starts[1])
    assert model.started() == [1, 3]
    model.release.set()
    results = await asyncio.gather(first, *together)
    for i, response in enumerate(results):
        assert response.outputs[0].data.tolist() == [[2.0 * i] * 3]
    worker.close()


async def test_a_full_queue_is_judged_after_the_put_off_dispatch(tmp_path: Path) -> None:
    """Admission counts the queue as it would be had the pump run at once: requests that
    wait only for the turn's end to be dispatched do not fill it."""
    worker, model = make_worker(tmp_path, max_queue=2)
    first = asyncio.ensure_future(worker.infer(request(0.0)))
    await started(model.starts[0])
    tasks = [asyncio.ensure_future(worker.infer(request(float(i)))) for i in (1, 2, 3)]
    await started(model.starts[1])
    model.release.set()
    results = await asyncio.gather(first, *tasks)  # none refused with "queue is full"
    assert [r.outputs[0].data.tolist() for r in results] == [[[2.0 * i] * 3] for i in range(4)]
    assert model.started()[:2] == [1, 2]  # the third arrival pumped: rows 1 and 2 went
    worker.close()
