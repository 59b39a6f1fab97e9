"""The request metric's code for a gRPC call the drain timeout cuts: 503, as REST counts a
cut request (server/cut.py), not the 499 of a client that left. The cut itself, end to
end on a real process, is tests/reliability/test_drain_cut.py."""

from __future__ import annotations

import asyncio

from podserve.core.errors import Draining
from podserve.server.cut import CUT_MESSAGE
from podserve.server.grpc.status import request_code as _code


def test_a_cut_counts_503_and_a_client_leaving_499() -> None:
    assert _code(asyncio.CancelledError(CUT_MESSAGE)) == "503"
    assert _code(asyncio.CancelledError()) == "499"
    assert _code(asyncio.CancelledError("some other reason")) == "499"
    assert _code(Draining()) == "503"
    assert _code(None) == "200"


def test_the_cut_message_reaches_the_handler_through_a_task_cancel() -> None:
    """`_Call._cancel` cancels the handler's task with CUT_MESSAGE; the CancelledError the
    handler sees at its await must carry it for `_code` to tell a cut apart."""

    async def scenario() -> str:
        seen: list[str] = []

        async def handler() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError as exc:
                seen.append(_code(exc))
                raise

        task = asyncio.ensure_future(handler())
        await asyncio.sleep(0)
        task.cancel(CUT_MESSAGE)
        await asyncio.gather(task, return_exceptions=True)
        return seen[0]

    assert asyncio.run(scenario()) == "503"
