"""The model worker stages a full batch behind a busy instance, so the model thread
starts it the moment its current call returns, even while the event loop is busy.

In process, with the real ModelWorker, the fake runtime and a real event loop; the
assertions are about order and counts, never about speed."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from podserve.config.model_config import load_model_config
from podserve.core.clock import MONOTONIC
from podserve.core.errors import DeadlineExceeded, Unavailable
from podserve.core.tensors import Datatype, InferRequest, Tensor
from podserve.engine.model_worker import ModelWorker, WorkerLimits
from podserve.obs.metrics import Metrics
from podserve.runtimes import LoadContext, create_model
from tests.support.server import write_model

BATCH_S = 0.2


class RecordingModel:
    """Wraps the fake model's predict to log when each batch starts and ends."""

    def __init__(self, worker: ModelWorker) -> None:
        self.log: list[tuple[str, float, int]] = []
        self.first_started = threading.Event()
        predict = worker.model.predict

        def recording(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            self.log.append(("start", time.monotonic(), len(batch["x"])))
            self.first_started.set()
            out = predict(batch)
            self.log.append(("end", time.monotonic(), len(batch["x"])))
            return out

        worker.model.predict = recording  # type: ignore[method-assign]


def make_worker(
    tmp_path: Path, loop: asyncio.AbstractEventLoop, max_queue: int = 16
) -> ModelWorker:
    directory = write_model(
        tmp_path,
        "m",
        parameters={"delay_s": BATCH_S},
        batching={"max_batch_size": 2, "max_queue_delay_ms": 1000, "work_conserving": False},
        warmup=False,
    )
    config = load_model_config(directory)
    model = create_model(config)
    model.load(LoadContext(config, directory))
    return ModelWorker(
        config=config,
        model=model,
        limits=WorkerLimits(max_queue=max_queue, max_batch_time_s=30),
        metrics=Metrics().for_model("m"),
        clock=MONOTONIC,
        loop=loop,
    )


def request(value: float, deadline_s: float | None = None) -> InferRequest:
    x = Tensor("x", Datatype.FP32, np.full((1, 3), value, dtype=np.float32))
    return InferRequest(model_name="m", inputs=(x,), deadline_s=deadline_s)


def test_a_staged_batch_starts_while_the_event_loop_is_blocked(tmp_path: Path) -> None:
    async def scenario() -> list[tuple[str, float, int]]:
        worker = make_worker(tmp_path, asyncio.get_running_loop())
        recorder = RecordingModel(worker)
        tasks = [asyncio.create_task(worker.infer(request(float(i)))) for i in range(4)]
        await asyncio.sleep(0)  # the tasks admit their requests
        assert recorder.first_started.wait(5)  # the first full batch is running
        assert worker.queue_depth == 2  # the staged batch still waits
        # Block the loop for longer than a batch: it cannot hear of the first batch's
        # completion, so only staging can start the second one meanwhile.
        time.sleep(5 * BATCH_S)  # noqa: ASYNC251  # blocking the loop is the point
        unblocked = time.monotonic()
        results = await asyncio.gather(*tasks)
        for i, response in enumerate(results):
            assert response.outputs[0].data.tolist() == [[2.0 * i] * 3]
        assert worker.queue_depth == 0
        worker.close()
        return [*recorder.log, ("unblocked", unblocked, 0)]

    log = asyncio.run(scenario())
    unblocked = log.pop()[1]
    assert [(kind, rows) for kind, _, rows in log] == [
        ("start", 2),
        ("end", 2),
        ("start", 2),
        ("end", 2),
    ]
    # the second batch started before the loop could have dispatched it
    assert log[2][1] < unblocked


def test_a_batch_that_could_still_grow_is_not_staged(tmp_path: Path) -> None:
    async def scenario() -> int:
        worker = make_worker(tmp_path, asyncio.get_running_loop())
        running = [asyncio.create_task(worker.infer(request(float(i)))) for i in range(2)]
        await asyncio.sleep(0.05)
        lone = asyncio.create_task(worker.infer(request(9.0)))
        await asyncio.sleep(0.05)
        depth = worker.queue_depth  # the lone request stays in the queue, free to grow
        await asyncio.gather(*running, lone)
        worker.close()
        return depth

    assert asyncio.run(scenario()) == 1


def test_a_staged_request_still_expires_and_is_never_computed(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[int], BaseException | None]:
        worker = make_worker(tmp_path, asyncio.get_running_loop())
        recorder = RecordingModel(worker)
        running = [asyncio.create_task(worker.infer(request(float(i)))) for i in range(2)]
        await asyncio.sleep(0.02)
        soon = MONOTONIC.now_s() + BATCH_S / 4
        staged = [
            asyncio.create_task(worker.infer(request(7.0, deadline_s=soon))),
            asyncio.create_task(worker.infer(request(8.0))),
        ]
        started = time.monotonic()
        outcome = await asyncio.gather(staged[0], return_exceptions=True)
        waited = time.monotonic() - started
        assert waited < BATCH_S  # answered at its deadline, not when its batch started
        await asyncio.gather(*running, staged[1])
        worker.close()
        rows = [rows for kind, _, rows in recorder.log if kind == "start"]
        error = outcome[0] if isinstance(outcome[0], BaseException) else None
        return rows, error

    rows, error = asyncio.run(scenario())
    assert isinstance(error, DeadlineExceeded)
    assert rows == [2, 1]  # the expired request never reached the model


def test_a_cancelled_staged_request_leaves_the_queue_and_is_skipped(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, list[int]]:
        worker = make_worker(tmp_path, asyncio.get_running_loop())
        recorder = RecordingModel(worker)
        tasks = [asyncio.create_task(worker.infer(request(float(i)))) for i in range(4)]
        await asyncio.sleep(0.05)
        tasks[3].cancel()
        await asyncio.sleep(0)
        depth = worker.queue_depth
        await asyncio.gather(*tasks[:3])
        worker.close()
        return depth, [rows for kind, _, rows in recorder.log if kind == "start"]

    depth, rows = asyncio.run(scenario())
    assert depth == 1
    assert rows == [2, 1]


def test_staged_requests_count_against_the_queue_bound(tmp_path: Path) -> None:
    async def scenario() -> str:
        worker = make_worker(tmp_path, asyncio.get_running_loop(), max_queue=2)
        tasks = [asyncio.create_task(worker.infer(request(float(i)))) for i in range(4)]
        await asyncio.sleep(0.05)
        with pytest.raises(Unavailable) as refused:
            await worker.infer(request(5.0))
        await asyncio.gather(*tasks)
        worker.close()
        return str(refused.value)

    assert "queue is full (2 waiting)" in asyncio.run(scenario())
