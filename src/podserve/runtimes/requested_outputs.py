"""The output names a client asks for, checked against the outputs a model has.

The names are client data of any count: a 23 MB REST body holds a million of them.
Checked only after the model ran, such a request cost a model call (4.9 s) and was
refused with every unknown name quoted, a 15 MB error body. So the check runs before the
request is queued, against the declared outputs (`ModelAPI.validate`), and its work is
bounded by the model, not the client: more names than the model has are refused by
count alone, the few left are looked up one by one, and an error quotes a handful of
names and a count of the rest (`runtimes/error_quotes.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

from podserve.core.errors import InvalidInput
from podserve.core.tensors import RequestedOutput
from podserve.runtimes.error_quotes import quote, quote_name


def check_requested(
    requested: Sequence[RequestedOutput], outputs: Sequence[str], model: str
) -> None:
    """Raise InvalidInput unless each requested name is one of `outputs`, once.

    Costs O(len(outputs)) whatever `len(requested)` is."""
    if not requested:
        return
    if len(requested) > len(outputs):
        raise InvalidInput(
            f"{len(requested)} outputs requested; model {model!r} has {len(outputs)} "
            f"({quote(outputs)}) and each may be requested once"
        )
    known = set(outputs)
    seen: set[str] = set()
    unknown: list[str] = []
    for output in requested:
        if output.name not in known:
            unknown.append(output.name)
        elif output.name in seen:
            raise InvalidInput(f"output {quote_name(output.name)} is requested more than once")
        seen.add(output.name)
    if unknown:
        raise InvalidInput(
            f"unknown requested output(s) {quote(unknown)}; model {model!r} has {quote(outputs)}"
        )
