"""Triton-style statistics: what counts, as Triton counts it."""

from __future__ import annotations

from podserve.engine.stats import Duration, StatsRecorder


def test_only_successes_count_as_inferences_and_executions() -> None:
    stats = StatsRecorder()
    stats.record_batch(
        rows=4,
        started=3,
        succeeded=2,
        succeeded_rows=3,
        queue_s=0.003,
        phases_s=(0.001, 0.01, 0.002),
    )
    stats.record_batch(
        rows=1,
        started=1,
        succeeded=0,
        succeeded_rows=0,
        queue_s=0.001,
        phases_s=(0.001, 0.02, 0.001),
    )
    stats.record_request(True, 0.5)
    stats.record_request(True, 0.25)
    stats.record_request(False, 0.125)
    snap = stats.snapshot("m", "1")
    assert (snap.inference_count, snap.execution_count) == (3, 1)
    assert snap.queue == Duration(4, 4_000_000)  # every request that reached a call
    # per successful request: preprocess, predict, postprocess of its batch
    assert snap.compute_input == Duration(2, 2_000_000)
    assert snap.compute_infer == Duration(2, 20_000_000)
    assert snap.compute_output == Duration(2, 4_000_000)
    assert snap.success == Duration(2, 750_000_000)
    assert snap.fail == Duration(1, 125_000_000)
    assert [(b.batch_size, b.compute_infer) for b in snap.batches] == [(4, Duration(1, 10_000_000))]
    assert snap.last_inference_ms > 0


def test_a_snapshot_is_a_copy() -> None:
    stats = StatsRecorder()
    stats.record_request(True, 1.0)
    first = stats.snapshot("m", "1")
    stats.record_request(True, 1.0)
    assert first.success == Duration(1, 1_000_000_000)
    assert StatsRecorder().snapshot("m", "1").last_inference_ms == 0
