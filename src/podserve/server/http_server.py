"""uvicorn's `Server`, with the runner owning signals and a shutdown paced by events
instead of fixed sleeps (issue 15 item 10: exit within 0.2 s of the drain completing).

uvicorn 0.54 (uvicorn/server.py) checks `should_exit` once every 0.1 s in `main_loop`,
then `shutdown()` sleeps a fixed 0.1 s after asking connections to close and polls them
every 0.1 s until `timeout_graceful_shutdown`. podserve drains before it asks uvicorn to
stop (nothing of ours is in flight by then), so those waits are pure delay: here the main
loop wakes on `exit_now()`, and the shutdown polls the connections every few
milliseconds. Connections with a response in progress (a probe, say) still get up to
`timeout_graceful_shutdown` to finish it; idle keep-alive connections close at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn

_POLL_S = 0.005  # between looks at the open connections during shutdown


class HttpServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._exit_now = asyncio.Event()

    def exit_now(self, *, force: bool = False) -> None:
        """Stop serving: close the listening socket and every connection, now."""
        self.should_exit = True
        if force:
            self.force_exit = True
        self._exit_now.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The runner owns SIGTERM/SIGINT (the drain), not uvicorn.
        yield

    async def main_loop(self) -> None:
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            # on_tick refreshes the Date header once per 10 ticks; keep its 0.1 s tick
            # but wake at once when told to exit.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit_now.wait(), timeout=0.1)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()  # idle: closes now; mid-response: after the response
        loop = asyncio.get_running_loop()
        grace_s = self.config.timeout_graceful_shutdown
        deadline = loop.time() + (float("inf") if grace_s is None else grace_s)
        # uvicorn's connection set has no event to wait on, so poll it (as uvicorn does).
        while (  # noqa: ASYNC110
            self.server_state.connections and not self.force_exit and loop.time() < deadline
        ):
            await asyncio.sleep(_POLL_S)
        for task in self.server_state.tasks:
            task.cancel()
