"""Run a command with its stderr on a real pseudo-terminal (what a container started with
`tty: true` gets), and collect what it wrote there."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from collections.abc import Mapping

# Variables that silence progress bars; a test sets them itself or not at all.
BAR_SWITCHES = ("HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE", "PODSERVE_LOG_FORMAT")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in BAR_SWITCHES}
    env.update({"COLUMNS": "120", "TERM": "xterm"}, **extra)
    return env


def run_with_tty_stderr(
    argv: list[str], env: Mapping[str, str], timeout_s: float = 120.0
) -> tuple[int, str, str]:
    """(exit code, stdout, what reached the terminal on stderr)."""
    master, slave = pty.openpty()
    # A new pty is 0x0: tqdm would draw a bar zero columns wide, i.e. nothing.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, *argv], stdout=subprocess.PIPE, stderr=slave, env=dict(env)
    )
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer of the terminal has closed it
            break
        if not chunk:
            break
        chunks.append(chunk)
    with contextlib.suppress(OSError):
        os.close(master)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    proc.stdout.close()
    code = proc.wait(timeout=timeout_s)
    return code, out, b"".join(chunks).decode("utf-8", "replace")
