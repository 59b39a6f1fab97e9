"""Inputs of a batching model share their first (batch) dimension: a request whose inputs
disagree is refused, and a batch is never assembled from payloads whose arrays disagree,
so no request's rows reach another request's answer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podserve.core.errors import InvalidInput
from podserve.core.tensors import InferRequest, Tensor
from podserve.runtimes import ModelAPI, Payload
from podserve.runtimes.batch_call import run_batch
from podserve.runtimes.batch_dimension import shared_rows
from tests.runtimes.runtime_helpers import EXAMPLES, load_dir


def _int32(rows: int, value: int) -> np.ndarray:
    return np.full((rows, 16), value, dtype=np.int32)


def _simple_request(rows0: int, rows1: int, value: int) -> InferRequest:
    return InferRequest(
        model_name="simple",
        inputs=(
            Tensor.from_array("INPUT0", _int32(rows0, value)),
            Tensor.from_array("INPUT1", _int32(rows1, value)),
        ),
    )


def test_shared_rows_is_the_first_dimension_the_arrays_share() -> None:
    assert shared_rows([("a", np.zeros((3, 2))), ("b", np.zeros((3,)))], "m") == 3
    assert shared_rows([], "m") == 1
    assert shared_rows([("scalar", np.ones(()))], "m") == 1


def test_shared_rows_names_the_inputs_and_their_batch_sizes() -> None:
    arrays = [("INPUT0", np.zeros((1, 16))), ("INPUT1", np.zeros((2, 16)))]
    with pytest.raises(InvalidInput) as info:
        shared_rows(arrays, "simple")
    assert info.value.message == (
        "input 'INPUT1' has batch size 2 but input 'INPUT0' has 1: the batch size does not "
        "match other inputs; every input of model 'simple' must share its first (batch) "
        "dimension"
    )


def test_shared_rows_quotes_names_cut_short() -> None:
    long_name = "x" * 1_000_000
    with pytest.raises(InvalidInput) as info:
        shared_rows([("a", np.zeros((1,))), (long_name, np.zeros((2,)))], "m")
    assert len(info.value.message) < 400


def test_a_batch_refuses_the_mismatched_request_and_answers_its_neighbours() -> None:
    """`podserve batch` scores chunks with run_batch(validate=True): the request whose
    inputs disagree fails alone and the others are computed from their own rows."""
    model = load_dir(EXAMPLES / "simple")
    requests = [
        _simple_request(2, 1, 1000),
        _simple_request(1, 1, 100),
        _simple_request(1, 2, 7000),
        _simple_request(3, 3, 5),
    ]
    outcomes = run_batch(model, requests, name="simple", validate=True)
    assert isinstance(outcomes[0], InvalidInput)
    assert "batch size does not match other inputs" in outcomes[0].message
    assert isinstance(outcomes[2], InvalidInput)
    victim, other = outcomes[1], outcomes[3]
    assert isinstance(victim, tuple)
    assert isinstance(other, tuple)
    assert {t.name: t.data.tolist() for t in victim} == {
        "OUTPUT0": _int32(1, 200).tolist(),
        "OUTPUT1": _int32(1, 0).tolist(),
    }
    assert {t.name: t.data.tolist() for t in other}["OUTPUT0"] == _int32(3, 10).tolist()


class _PairModel(ModelAPI):
    """Its preprocess returns arrays whose rows disagree (a model's own mistake the
    engine cannot see before the request is queued); it records each predict call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Payload] = []

    def preprocess(self, request: InferRequest) -> Payload:
        x = request.input_map()["x"].data
        return {"x": x, "first": x[:1]}

    def predict(self, batch: Payload) -> Payload:
        self.calls.append(batch)
        return {"y": batch["x"] + batch["first"]}


def test_a_batch_is_never_assembled_from_payloads_whose_arrays_disagree() -> None:
    model = _PairModel()
    requests = [
        InferRequest(model_name="m", inputs=(Tensor.from_array("x", np.array(rows)),))
        for rows in ([[1], [2]], [[10]], [[100], [200], [300]])
    ]
    outcomes = run_batch(model, requests, name="m")
    # computed one by one, each from its own rows only
    assert [len(call["x"]) for call in model.calls] == [2, 1, 3]
    answers = [o[0].data.ravel().tolist() for o in outcomes if isinstance(o, tuple)]
    assert answers == [[2, 3], [20], [200, 300, 400]]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(-1000, 1000)),
        min_size=1,
        max_size=8,
    )
)
def test_no_request_is_answered_from_another_requests_rows(
    shapes: list[tuple[int, int, int]],
) -> None:
    model = load_dir(EXAMPLES / "simple")
    requests = [_simple_request(r0, r1, value) for r0, r1, value in shapes]
    outcomes = run_batch(model, requests, name="simple", validate=True)
    for (rows0, rows1, value), outcome in zip(shapes, outcomes, strict=True):
        if rows0 != rows1:
            assert isinstance(outcome, InvalidInput)
            continue
        assert isinstance(outcome, tuple)
        got = {t.name: t.data for t in outcome}
        np.testing.assert_array_equal(got["OUTPUT0"], _int32(rows0, 2 * value))
        np.testing.assert_array_equal(got["OUTPUT1"], _int32(rows0, 0))
