"""The batch dimension: the first dimension that every input of a batching model shares.

A model that batches (Triton's max_batch_size > 0) reads each input's first dimension as
its rows. The engine concatenates the requests of a batch input by input and splits the
outputs back by the rows each request brought. Inputs that disagree break that for the
whole batch: with INPUT0 of 1 row and INPUT1 of 2, INPUT1's rows shift against INPUT0's,
and a well-formed neighbour's answer is computed from another client's data (seen on
`simple`: 7 of 240 correct requests answered wrongly when batched with such requests).

Triton refuses such a request ("input 'INPUT1' batch size does not match other inputs");
so do we, before the request is queued (`engine/model_worker.py`), and again when a batch
is assembled (`runtimes/batch_call.py`), because a model's own `preprocess` makes the
arrays that are concatenated.
"""

from __future__ import annotations

from collections.abc import Iterable

from podserve.core.errors import InvalidInput
from podserve.core.types import Array
from podserve.runtimes.error_quotes import quote_name


def shared_rows(arrays: Iterable[tuple[str, Array]], model: str) -> int:
    """The first dimension the named arrays all share: the rows they add to a batch.

    1 when there is no array; a scalar counts as one row, as the engine has always
    counted it. Raises InvalidInput naming the first two arrays that disagree (two, so
    the message stays short whatever the number of inputs)."""
    first_name: str | None = None
    first_rows = 1
    for name, array in arrays:
        rows = int(array.shape[0]) if array.ndim else 1
        if first_name is None:
            first_name, first_rows = name, rows
        elif rows != first_rows:
            raise InvalidInput(
                f"input {quote_name(name)} has batch size {rows} but input "
                f"{quote_name(first_name)} has {first_rows}: the batch size does not match "
                f"other inputs; every input of model {model!r} must share its first (batch) "
                "dimension"
            )
    return first_rows
