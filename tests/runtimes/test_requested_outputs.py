"""Requested output names are checked against the declared outputs before the model
runs, with work bounded by the model's outputs, and errors quote a few names only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from podserve.core.errors import InvalidInput
from podserve.core.tensors import RequestedOutput
from podserve.runtimes.error_quotes import quote
from podserve.runtimes.requested_outputs import check_requested
from tests.runtimes.runtime_helpers import EXAMPLES, load_dir, request, tensor, write_yaml

DECLARED = ("OUTPUT0", "OUTPUT1")


def _names(*names: str) -> tuple[RequestedOutput, ...]:
    return tuple(RequestedOutput(name) for name in names)


def test_declared_names_once_each_pass() -> None:
    check_requested(_names(), DECLARED, "simple")
    check_requested(_names("OUTPUT1"), DECLARED, "simple")
    check_requested(_names("OUTPUT1", "OUTPUT0"), DECLARED, "simple")


def test_more_names_than_the_model_has_are_refused_by_count() -> None:
    many = _names(*(f"label{i}" for i in range(1_000_000)))
    with pytest.raises(InvalidInput) as info:
        check_requested(many, DECLARED, "simple")
    assert info.value.message == (
        "1000000 outputs requested; model 'simple' has 2 (['OUTPUT0', 'OUTPUT1']) and each "
        "may be requested once"
    )


def test_a_name_requested_twice_is_refused() -> None:
    with pytest.raises(InvalidInput, match="output 'OUTPUT0' is requested more than once"):
        check_requested(_names("OUTPUT0", "OUTPUT0"), DECLARED, "simple")


def test_unknown_names_are_quoted_a_few_and_cut_short() -> None:
    outputs = tuple(f"out{i}" for i in range(20))
    requested = _names("y" * 10_000, *(f"nope{i}" for i in range(9)))
    with pytest.raises(InvalidInput) as info:
        check_requested(requested, outputs, "m")
    message = info.value.message
    assert message.startswith(f"unknown requested output(s) ['{'y' * 64}', 'nope0', ")
    assert "nope3'] and 5 more; model 'm' has ['out0'," in message
    assert message.endswith("'out4'] and 15 more")


def test_quote_counts_what_it_does_not_show() -> None:
    assert quote(["a", "b"]) == "['a', 'b']"
    assert quote(["a", "b"], total=9) == "['a', 'b'] and 7 more"


def test_validate_refuses_undeclared_outputs_before_predict() -> None:
    model = load_dir(EXAMPLES / "simple")
    x = np.ones((1, 16), dtype=np.int32)
    inputs = (tensor("INPUT0", x), tensor("INPUT1", x))
    model.validate(request(*inputs, outputs=("OUTPUT1",)))
    with pytest.raises(InvalidInput, match=r"unknown requested output\(s\) \['OUTPUT9'\]"):
        model.validate(request(*inputs, outputs=("OUTPUT9",)))
    with pytest.raises(InvalidInput, match="3 outputs requested"):
        model.validate(request(*inputs, outputs=("OUTPUT0", "OUTPUT1", "OUTPUT9")))


def test_unknown_inputs_are_quoted_a_few() -> None:
    model = load_dir(EXAMPLES / "simple")
    x = np.ones((1, 16), dtype=np.int32)
    extra = [tensor(f"extra{i}", x) for i in range(1000)]
    with pytest.raises(InvalidInput) as info:
        model.validate(request(tensor("INPUT0", x), tensor("INPUT1", x), *extra))
    assert info.value.message == (
        "unknown input(s) ['extra0', 'extra1', 'extra2', 'extra3', 'extra4'] and 995 more; "
        "expected ['INPUT0', 'INPUT1']"
    )


def test_a_model_without_declared_outputs_is_checked_against_what_it_produced(
    tmp_path: Path,
) -> None:
    """Nothing to check before it runs: postprocess refuses, quoting a few names."""
    directory = write_yaml(
        tmp_path / "fake",
        "runtime: fake\ninputs:\n  - {name: x, datatype: FP32, shape: [-1, 3]}\n",
    )
    model = load_dir(directory)
    req = request(
        tensor("x", np.ones((1, 3), dtype=np.float32)),
        outputs=tuple(f"nope{i}" for i in range(100_000)),
    )
    model.validate(req)
    produced = model.predict(model.preprocess(req))
    with pytest.raises(InvalidInput) as info:
        model.postprocess(produced, req)
    assert info.value.message == (
        "100000 outputs requested; model 'm' has 1 (['y']) and each may be requested once"
    )
    only_y = request(tensor("x", np.ones((1, 3), dtype=np.float32)), outputs=("y",))
    assert [t.name for t in model.postprocess(produced, only_y)] == ["y"]
