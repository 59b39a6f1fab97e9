"""Leave the server process once it has drained and closed what it owns, without the
interpreter's own finalization (issue 15 item 10, issue 16 item 6).

After `serve()` returns, everything podserve owes anyone is done: the drain finished
(or cut what it had to, answering each), the listeners are closed, shared-memory regions
unmapped, the payload log flushed, the log handlers flushed. What `sys.exit` would do
next is tear down the interpreter: join threads (a model load still running in the
default executor: seconds), run C-level finalizers and free every module. Measured on
the dev machine (benchmarks/exit_tail.py and an in-process probe): 1.5 s after the
last line of `main` with only scikit-learn imported, 3.9-5.2 s with torch and a
generation engine, against 0.01 s for the work above; and a generation thread still
inside torch while the interpreter finalizes is what turned a drain timeout into a
SIGABRT (exit 134). `os._exit` skips all of it, after flushing the standard streams.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn


def exit_process(code: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken pipe must not block exit
            stream.flush()
    os._exit(code)
