"""The `simple` example model's own arithmetic, loaded the way the server loads it."""

from __future__ import annotations

import numpy as np
import pytest

from podserve.core.errors import InvalidInput
from podserve.core.tensors import Datatype
from tests.runtimes.runtime_helpers import EXAMPLES, infer, load_dir, request, tensor


def test_int32_wraps_around_like_the_tensorflow_graph() -> None:
    model = load_dir(EXAMPLES / "simple")
    big = np.full((1, 16), np.iinfo(np.int32).max, dtype=np.int32)
    one = np.ones((1, 16), dtype=np.int32)
    out = infer(model, request(tensor("INPUT0", big), tensor("INPUT1", one)))
    assert out["OUTPUT0"].data.tolist() == [[np.iinfo(np.int32).min] * 16]
    assert out["OUTPUT1"].data.tolist() == [[np.iinfo(np.int32).max - 1] * 16]


def test_simple_string_computes_on_integers_written_as_text() -> None:
    model = load_dir(EXAMPLES / "simple_string")
    a = np.array([[str(v).encode() for v in range(-8, 8)]], dtype=object)
    b = np.array([[b"10"] * 16], dtype=object)
    out = infer(
        model, request(tensor("INPUT0", a, Datatype.BYTES), tensor("INPUT1", b, Datatype.BYTES))
    )
    assert out["OUTPUT0"].datatype is Datatype.BYTES
    assert [int(v) for v in out["OUTPUT0"].data.ravel()] == [v + 10 for v in range(-8, 8)]
    assert [int(v) for v in out["OUTPUT1"].data.ravel()] == [v - 10 for v in range(-8, 8)]
    # Its warm-up request is numbers too (the default one would be empty strings).
    warmup = model.warmup_request("simple_string")
    assert warmup is not None
    infer(model, warmup)
    too_big = np.array([[b"4294967296"] * 16], dtype=object)
    with pytest.raises(InvalidInput, match="element 0 is b'4294967296', not an INT32"):
        infer(
            model,
            request(tensor("INPUT0", too_big, Datatype.BYTES), tensor("INPUT1", b, Datatype.BYTES)),
        )
