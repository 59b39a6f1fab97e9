"""A throwaway PostgreSQL 15 server: initdb + postgres on a temp dir and a free loopback
port, trust auth, no fsync. Used by the gateway tests (tests/gateway/support.py) and the
gateway benchmark (benchmarks/gateway.py), so both start it the same way."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.ports import free_port
from tests.support.server import wait_until

# Debian's postgresql package; .ci/run installs it.
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def postgres_installed() -> bool:
    return (PG_BIN / "postgres").exists()


@contextlib.contextmanager
def postgres_server(prefix: str = "pg-") -> Iterator[str]:
    """Yield the DSN of a running server; stop it and remove its files on exit."""
    if not postgres_installed():
        raise FileNotFoundError(
            f"PostgreSQL 15 is not installed ({PG_BIN}; Debian package postgresql)"
        )
    data = Path(tempfile.mkdtemp(prefix=prefix))
    port = free_port()
    as_user: list[str] = []
    if os.geteuid() == 0:  # postgres refuses to run as root
        shutil.chown(data, "postgres", "postgres")
        # runuser lives in /usr/sbin, which a minimal PATH (CI's `env -i`) leaves out.
        sbin = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
        as_user = [shutil.which("runuser", path=sbin) or "runuser", "-u", "postgres", "--"]
    db = str(data / "db")
    subprocess.run(
        [*as_user, str(PG_BIN / "initdb"), "-D", db, "-A", "trust", "-U", "postgres", "--no-sync"],
        check=True,
        capture_output=True,
    )
    proc = subprocess.Popen(
        [
            *as_user,
            str(PG_BIN / "postgres"),
            *("-D", db, "-p", str(port), "-h", "127.0.0.1", "-k", str(data), "-c", "fsync=off"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def up() -> bool:
        import psycopg

        try:
            psycopg.connect(dsn, connect_timeout=1).close()
        except psycopg.OperationalError:
            return False
        return True

    try:
        wait_until(up, timeout_s=30, what="postgres")
        yield dsn
    finally:
        # runuser does not pass signals on; pg_ctl stops the postmaster itself.
        subprocess.run(
            [*as_user, str(PG_BIN / "pg_ctl"), "-D", db, "stop", "-m", "fast"],
            capture_output=True,
            timeout=30,
        )
        proc.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)
