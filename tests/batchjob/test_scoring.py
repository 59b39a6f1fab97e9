"""Chunk scoring: one bad line never fails its chunk-mates."""

from __future__ import annotations

import numpy as np

from podserve.batchjob import score
from podserve.core.errors import InferenceFailed, InvalidInput
from podserve.core.tensors import Datatype, InferRequest, Tensor
from tests.batchjob.support import fake_model


def _request(*values: float, shape: tuple[int, ...] = (1, 2)) -> InferRequest:
    data = np.array(values, dtype=np.float32).reshape(shape)
    return InferRequest(model_name="fake", inputs=(Tensor("x", Datatype.FP32, data),))


def test_a_failing_batch_is_retried_one_by_one_so_only_the_culprit_fails() -> None:
    model = fake_model(fail_value=13.0)
    outcomes = score(model, [_request(1, 2), _request(13, 0), _request(3, 4)])
    assert isinstance(outcomes[1], InferenceFailed)
    for outcome, want in ((outcomes[0], [[2, 4]]), (outcomes[2], [[6, 8]])):
        assert isinstance(outcome, tuple)
        assert outcome[0].data.tolist() == want


def test_a_request_failing_validation_keeps_its_error_and_others_are_scored() -> None:
    model = fake_model()
    outcomes = score(model, [_request(1, 2, 3, shape=(1, 3)), _request(1, 1)])
    assert isinstance(outcomes[0], InvalidInput)
    assert isinstance(outcomes[1], tuple)
    assert outcomes[1][0].data.tolist() == [[2, 2]]


def test_multi_row_requests_are_split_back_by_their_own_row_counts() -> None:
    model = fake_model()
    outcomes = score(model, [_request(1, 2, 3, 4, shape=(2, 2)), _request(5, 6)])
    assert [o[0].data.tolist() for o in outcomes if isinstance(o, tuple)] == [
        [[2, 4], [6, 8]],
        [[10, 12]],
    ]
