"""A gate on a real call that runs off the event loop (a tokenizer, a counter): the test
holds the call inside until it opens the gate, so it can show what the event loop still
does meanwhile. Had the call run on the loop, nobody could open the gate: the wait times
out and `opened_in_time` records False."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")
P = TypeVar("P")


@dataclass
class Gate:
    entered: threading.Event = field(default_factory=threading.Event)
    opened: threading.Event = field(default_factory=threading.Event)
    opened_in_time: list[bool] = field(default_factory=list)
    threads: list[str] = field(default_factory=list)  # where each gated call ran

    @property
    def calls(self) -> int:
        return len(self.threads)

    def pass_through(self) -> None:
        """Called at the start of the gated call, on its thread: wait for the test."""
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        self.opened_in_time.append(self.opened.wait(timeout=5))


async def until(flag: threading.Event) -> None:
    """Wait (on the loop, polling) until `flag` is set; fail after 10 s."""
    for _ in range(2000):
        if flag.is_set():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the gated call was never made")


async def probed_while_held(
    gate: Gate, call: Awaitable[T], probe: Callable[[], Awaitable[P]]
) -> tuple[P, T]:
    """Start `call`; once its gated step is entered (and held there), run `probe` (a
    liveness check) and check `call` is still waiting; then open the gate. The probe's
    answer and the call's."""
    task = asyncio.ensure_future(call)
    await until(gate.entered)
    probed = await probe()
    assert not task.done()
    gate.opened.set()
    return probed, await task
