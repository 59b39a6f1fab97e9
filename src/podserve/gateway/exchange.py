"""A proxied request after its admission: forwarded, its answer relayed, its hold settled
exactly once, whatever happens.

Every admitted hold ends in one settlement here, at once, never left to its lease (which
charges the whole hold, and, renewed while the request is in flight, would never run
out):

- anything that fails before a byte went upstream (re-encoding the body, a bug) settles
  it at zero, like a refusal: before, one bad request held its key's, team's and
  namespace's budget for `leaseS` (600 s) and was then charged in full (a probe:
  an `expired` row, upstream "");
- a client that leaves while the upstream works on a non-streamed request cancels it
  (its connection is closed, so a podserve or vLLM pod stops generating) and is charged
  its whole hold: the upstream reports no usage for a request cut short, and the hold is
  the most it can have cost (a stream the client leaves is charged prompt + tokens sent,
  `relay`);
- anything else that fails after the request went upstream is charged its whole hold
  too: the upstream may have done the work.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from podserve.gateway.accounting import Admission
from podserve.gateway.asgi import Call, ClientGone, Headers, Reply
from podserve.gateway.budget import Usage
from podserve.gateway.client_watch import ClientWatch
from podserve.gateway.forward import UPSTREAM_ERRORS, Attempted, upstream_failed
from podserve.gateway.relay import relay_stream
from podserve.gateway.sse import EventRelay, StreamTally
from podserve.gateway.store.base import Outcome
from podserve.gateway.upstream_http import ResponseTooLarge
from podserve.gateway.usage import billed_usage, held_usage
from podserve.gateway.wire import (
    BINARY_JSON_LENGTH,
    OVERHEAD,
    REQUEST_ID,
    UPSTREAM,
    Billable,
    Endpoint,
)

if TYPE_CHECKING:
    from podserve.gateway.app import Gateway

T = TypeVar("T")
CLIENT_CLOSED = 499  # the request metric's code for a client that left (nginx's)


@dataclass(slots=True)
class Exchange:
    """One admitted request's progress: whether it went upstream, whether it settled."""

    admission: Admission
    bill: Billable
    watch: ClientWatch
    sent: bool = False  # forwarding began: the upstream may have the request
    settled: bool = False
    upstream: str = ""  # the upstream that answered, once one has


async def settle(
    gw: Gateway, ex: Exchange, usage: Usage, outcome: Outcome, upstream: str, code: int
) -> None:
    ex.settled = True
    await gw.settle_admitted(ex.admission, usage, outcome, upstream, code)


async def settle_failed(gw: Gateway, ex: Exchange, exc: BaseException) -> None:
    """The request failed before it settled (see the module docstring)."""
    a = ex.admission
    gone = isinstance(exc, ClientGone)
    if not ex.sent:
        await settle(gw, ex, Usage(0, 0), Outcome.ERROR, "", CLIENT_CLOSED if gone else 500)
        return
    held = held_usage(a.prompt_tokens, a.max_tokens, ex.bill.choices)
    outcome = Outcome.CANCELLED if gone else Outcome.ERROR
    await settle(gw, ex, held, outcome, ex.upstream, CLIENT_CLOSED if gone else 500)


async def unless_gone(watch: ClientWatch, work: Awaitable[T]) -> T:
    """`work`'s result, unless the client leaves first: then `work` is cancelled (an
    upstream call closes its connection) and ClientGone raised.

    `work` runs in the caller's task, which the watch cancels if it fires: every request
    passes here twice (the upstream call, the answer's read), and a task of its own plus
    an `asyncio.wait` for each cost the hot path two tasks and their wake-ups."""
    current = asyncio.current_task()
    assert current is not None  # called from a request's task
    gone = watch.gone()
    fired = False
    waiting = True  # a callback already scheduled when `work` ends must not cancel later work

    def cancel_work(_: object) -> None:
        nonlocal fired
        if waiting and watch.left:
            fired = True
            current.cancel()

    gone.add_done_callback(cancel_work)
    try:
        return await work
    except BaseException:
        if fired:  # cancelled for the client, or failed as its cancel cut the upstream
            current.uncancel()
            raise ClientGone from None
        raise
    finally:
        waiting = False
        gone.remove_done_callback(cancel_work)


async def unary_reply(
    gw: Gateway, ex: Exchange, attempt: Attempted, endpoint: Endpoint, started: float, rid: str
) -> Reply:
    """The upstream's whole answer as the reply; settled once it is sent (`after`)."""
    admission, bill = ex.admission, ex.bill
    response = attempt.response
    oip = endpoint is Endpoint.V2
    try:
        content = await unless_gone(ex.watch, response.read(gw.config.max_response_bytes))
    except (*UPSTREAM_ERRORS, ResponseTooLarge) as exc:
        gw.forwarder.finished(attempt, False)
        # Too large: the upstream did the work, and its usage is in the body not read.
        usage = (
            held_usage(admission.prompt_tokens, admission.max_tokens, bill.choices)
            if isinstance(exc, ResponseTooLarge)
            else Usage(0, 0)
        )
        await settle(gw, ex, usage, Outcome.ERROR, attempt.target.upstream, 502)
        return gw.refuse(upstream_failed(exc), started, oip)
    except BaseException:
        gw.forwarder.finished(attempt, True)  # the upstream answered; the client left
        raise
    finally:
        response.release()  # a body not read to its end: the connection is closed
    upstream_s = attempt.upstream_s
    gw.forwarder.finished(attempt, response.status < 500)
    outcome = Outcome.ERROR if response.status >= 400 else Outcome.OK
    if oip or outcome is Outcome.ERROR:
        # v2: no tokens to bill (the body is not parsed); an error generated nothing
        usage = Usage(0, 0)
    else:
        usage = billed_usage(content, admission.prompt_tokens, admission.max_tokens, bill.choices)
    reply = gw.json_reply(
        content,
        response.status,
        started,
        upstream_s,
        response.headers.get("content-type", "application/json"),
    )
    upstream = attempt.target.upstream
    reply.headers += ((UPSTREAM, upstream.encode()), (REQUEST_ID, rid.encode()))
    binary_json = response.headers.get(BINARY_JSON_LENGTH.decode())
    if oip and binary_json is not None:
        reply.headers.append((BINARY_JSON_LENGTH, binary_json.encode("latin-1")))
    status = response.status

    async def after() -> None:
        # After the body is sent: the store's round trip is not the client's wait.
        await settle(gw, ex, usage, outcome, upstream, status)

    reply.after = after
    return reply


async def stream(
    gw: Gateway, call: Call, ex: Exchange, attempt: Attempted, started: float, rid: str
) -> None:
    admission, bill = ex.admission, ex.bill
    upstream = attempt.target.upstream

    async def finish(outcome: Outcome, tally: StreamTally) -> None:
        gw.forwarder.finished(attempt, True)
        if tally.usage is not None:
            # Never less than was relayed: an upstream that reports its usage and
            # then goes on sending tokens was billed for the tokens before it only.
            reported = tally.usage
            completion = max(reported.completion_tokens, tally.tokens_sent)
            usage, final = Usage(reported.prompt_tokens, completion), Outcome.OK
        elif outcome is Outcome.CANCELLED:
            usage, final = Usage(admission.prompt_tokens, tally.tokens_sent), outcome
        else:  # finished without a usage chunk: charge the whole hold
            held = held_usage(admission.prompt_tokens, admission.max_tokens, bill.choices)
            usage, final = held, Outcome.OK
        await settle(gw, ex, usage, final, upstream, 200)

    overhead_ms = (time.perf_counter() - started - attempt.upstream_s) * 1000
    gw.metrics.overhead.observe(overhead_ms / 1000)
    headers: Headers = [
        (OVERHEAD, f"{overhead_ms:.3f}".encode()),
        (UPSTREAM, upstream.encode()),
        (REQUEST_ID, rid.encode()),
        (b"cache-control", b"no-cache"),
    ]
    ex.watch.stop()  # the relay watches for itself
    await relay_stream(
        attempt.response, EventRelay(bill.wants_usage), headers, finish, call.receive, call.send
    )
