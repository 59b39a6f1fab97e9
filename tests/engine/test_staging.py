"""The model worker stages a full batch behind a busy instance, so the model thread
starts it the moment its current call returns, even while the event loop is busy.

In process, with the real ModelWorker and a real event loop, on a fake clock: the model
holds each call at a gate the test opens, so the order of events is set by the test,
never by timing, and no test sleeps. Deadlines are judged on the fake clock."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from podserve.config.model_config import ModelConfig, load_model_config
from podserve.core.clock import FakeClock
from podserve.core.errors import DeadlineExceeded, Unavailable
from podserve.core.tensors import Datatype, InferRequest, Tensor, TensorSpec
from podserve.engine.model_worker import ModelWorker, WorkerLimits
from podserve.obs.metrics import Metrics
from podserve.runtimes import ModelAPI, Payload
from tests.support.server import write_model

WAIT_S = 10  # bounds every wait on the model thread, so a failure cannot hang the run


class GateModel(ModelAPI):
    """y = 2x; each call logs its start and end and waits at `release`."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs = (TensorSpec("x", Datatype.FP32, (-1, 3)),)
        self.outputs = (TensorSpec("y", Datatype.FP32, (-1, 3)),)
        self.log: list[tuple[str, int]] = []
        self.release = threading.Event()
        self.starts = [threading.Event() for _ in range(8)]

    def predict(self, batch: Payload) -> Payload:
        rows = len(batch["x"])
        self.log.append(("start", rows))
        self.starts[sum(kind == "start" for kind, _ in self.log) - 1].set()
        assert self.release.wait(WAIT_S)
        self.log.append(("end", rows))
        return {"y": batch["x"] * 2}

    def started(self) -> list[int]:
        return [rows for kind, rows in self.log if kind == "start"]


def config(tmp_path: Path) -> ModelConfig:
    directory = write_model(
        tmp_path,
        "m",
        batching={"max_batch_size": 2, "max_queue_delay_ms": 1000, "work_conserving": False},
        warmup=False,
    )
    return load_model_config(directory)


def make_worker(
    tmp_path: Path, clock: FakeClock, max_queue: int = 16
) -> tuple[ModelWorker, GateModel]:
    model = GateModel()
    worker = ModelWorker(
        config=config(tmp_path),
        model=model,
        limits=WorkerLimits(max_queue=max_queue, max_batch_time_s=30),
        metrics=Metrics().for_model("m"),
        clock=clock,
        loop=asyncio.get_running_loop(),
    )
    return worker, model


def request(value: float, deadline_s: float | None = None) -> InferRequest:
    x = Tensor("x", Datatype.FP32, np.full((1, 3), value, dtype=np.float32))
    return InferRequest(model_name="m", inputs=(x,), deadline_s=deadline_s)


async def until(predicate: Callable[[], bool], what: str) -> None:
    """Let the loop run (no clock involved) until `predicate` holds."""
    for _ in range(10_000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


async def started(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, WAIT_S)


async def test_a_staged_batch_starts_while_the_event_loop_is_blocked(tmp_path: Path) -> None:
    worker, model = make_worker(tmp_path, FakeClock())
    tasks = [asyncio.ensure_future(worker.infer(request(float(i)))) for i in range(4)]
    await started(model.starts[0])  # the first full batch is running
    await until(lambda: worker.queue_depth == 2, "the second batch to be staged")
    model.release.set()
    # Block the loop until the model thread has started the second batch: the loop cannot
    # hear of the first batch's completion, so only staging can start the second one.
    assert model.starts[1].wait(WAIT_S)  # blocking the loop is the point
    results = await asyncio.gather(*tasks)
    for i, response in enumerate(results):
        assert response.outputs[0].data.tolist() == [[2.0 * i] * 3]
    assert model.log == [("start", 2), ("end", 2), ("start", 2), ("end", 2)]
    assert worker.queue_depth == 0
    worker.close()


async def test_a_batch_that_could_still_grow_is_not_staged(tmp_path: Path) -> None:
    worker, model = make_worker(tmp_path, FakeClock())
    running = [asyncio.ensure_future(worker.infer(request(float(i)))) for i in range(2)]
    await started(model.starts[0])
    lone = asyncio.ensure_future(worker.infer(request(9.0)))
    await until(lambda: worker.queue_depth == 1, "the lone request to queue")
    model.release.set()
    await asyncio.gather(*running)
    # had it been staged, it would have run alone; it waited and grew instead
    partner = asyncio.ensure_future(worker.infer(request(8.0)))
    await asyncio.gather(lone, partner)
    assert model.started() == [2, 2]
    worker.close()


async def test_a_staged_request_past_its_deadline_is_never_computed(tmp_path: Path) -> None:
    clock = FakeClock()
    worker, model = make_worker(tmp_path, clock)
    running = [asyncio.ensure_future(worker.infer(request(float(i)))) for i in range(2)]
    await started(model.starts[0])
    late = asyncio.ensure_future(worker.infer(request(7.0, deadline_s=clock.now_s() + 1)))
    kept = asyncio.ensure_future(worker.infer(request(8.0)))
    await until(lambda: worker.queue_depth == 2, "both to be staged")
    clock.advance(2)  # the deadline passes while the batch waits behind the busy instance
    model.release.set()
    with pytest.raises(DeadlineExceeded, match="not computed"):
        await late
    await asyncio.gather(*running, kept)
    assert model.started() == [2, 1]  # the expired request never reached the model
    worker.close()


async def test_a_cancelled_staged_request_leaves_the_queue_and_is_skipped(
    tmp_path: Path,
) -> None:
    worker, model = make_worker(tmp_path, FakeClock())
    tasks = [asyncio.ensure_future(worker.infer(request(float(i)))) for i in range(4)]
    await started(model.starts[0])
    await until(lambda: worker.queue_depth == 2, "the second batch to be staged")
    tasks[3].cancel()
    await until(lambda: worker.queue_depth == 1, "the cancelled request to leave")
    model.release.set()
    await asyncio.gather(*tasks[:3])
    assert model.started() == [2, 1]
    worker.close()


async def test_staged_requests_count_against_the_queue_bound(tmp_path: Path) -> None:
    worker, model = make_worker(tmp_path, FakeClock(), max_queue=2)
    tasks = [asyncio.ensure_future(worker.infer(request(float(i)))) for i in range(4)]
    await started(model.starts[0])
    await until(lambda: worker.queue_depth == 2, "the second batch to be staged")
    with pytest.raises(Unavailable, match=r"queue is full \(2 waiting\)"):
        await worker.infer(request(5.0))
    model.release.set()
    await asyncio.gather(*tasks)
    worker.close()


async def test_a_deadline_timer_that_fires_early_is_armed_again(tmp_path: Path) -> None:
    """The loop's timer can fire before the deadline on the worker's clock (uvloop keeps
    whole milliseconds): the request must still expire once the deadline passes, not wait
    unexpired for a free instance and be computed late (seen as a flaky 200 for a 200 ms
    `x-request-timeout-ms` behind a busy model)."""
    clock = FakeClock()
    worker, model = make_worker(tmp_path, clock)
    running = [asyncio.ensure_future(worker.infer(request(float(i)))) for i in range(2)]
    await started(model.starts[0])
    late = asyncio.ensure_future(worker.infer(request(7.0, deadline_s=clock.now_s() + 0.001)))
    await until(lambda: worker.queue_depth == 1, "the request to queue")
    # The real timer (1 ms) fires while the fake clock has not reached the deadline.
    await asyncio.sleep(0.02)  # waiting for that timer is the point
    assert not late.done()
    clock.advance(1)
    with pytest.raises(DeadlineExceeded, match="not computed"):
        await asyncio.wait_for(late, timeout=WAIT_S)
    model.release.set()
    await asyncio.gather(*running)
    assert model.started() == [2]  # the expired request never reached the model
    worker.close()
