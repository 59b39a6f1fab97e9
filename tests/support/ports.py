"""A free TCP port on loopback, for servers (redis-server, a dead endpoint) that cannot be
told to pick one themselves: redis-server reads `--port 0` as "no TCP listener" (see
`port` in https://github.com/redis/redis/blob/7.0/redis.conf), not as "any free port"."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now. Another process may take it before the caller binds
    it; the callers start their server at once, which makes that rare, not impossible."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:port now."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True
