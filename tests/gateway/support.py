"""Real parts for the gateway tests: gateway processes, Redis and PostgreSQL on loopback."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.postgres import PG_BIN, postgres_installed
from tests.support.postgres import postgres_server as _postgres_server
from tests.support.redis import redis_server as _redis_server
from tests.support.server import ServerProcess, wait_until

ROOT = Path(__file__).resolve().parents[2]
TINY_LM = ROOT / "examples" / "models" / "tiny-lm"
PROXY_ENV = tuple(
    v for n in ("http_proxy", "https_proxy", "no_proxy", "all_proxy") for v in (n, n.upper())
)


class GatewayProcess(ServerProcess):
    """`podserve gateway --config` in a subprocess; the port comes from its listening log."""

    def __init__(self, config: dict[str, Any], workdir: Path, env: dict[str, str] | None = None):
        super().__init__(env=env)
        # base_config's hosted fallback names it; a gateway refuses to start without it
        self.env.setdefault("HOSTED_API_KEY", "sk-test")
        # The pods are on loopback: a proxy in the machine's environment (a CI runner's)
        # would get their traffic. Only a test's own proxy settings reach the gateway.
        for name in PROXY_ENV:
            if name not in (env or {}):
                self.env.pop(name, None)
        self.workdir = workdir
        self.config_path = workdir / "gateway.yaml"
        self.config_path.write_text(yaml.safe_dump(config))

    def start(self) -> GatewayProcess:
        cmd = [
            sys.executable,
            "-m",
            "podserve.cli.main",
            "gateway",
            "--config",
            str(self.config_path),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=self.workdir,
        )
        import threading

        self._reader = threading.Thread(target=self._read_logs, daemon=True)
        self._reader.start()
        line = self.wait_log(lambda r: r.get("msg") == "podserve gateway listening", 60)
        self.http_port = int(line["http_port"])
        return self

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(self.config_path, *args, env=self.env)


def run_cli(
    config: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`podserve gateway <args> --config <config>` in process (the CLI's own entry point;
    a subprocess per call would cost a Python start each). args[0] is keys/spend."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from podserve.cli.main import main

    head, *tail = args
    argv = ["gateway", head, *tail, "--config", str(config)]
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        # A relative store path resolves from the config's directory, as for the gateway.
        with contextlib.chdir(config.parent), redirect_stdout(out), redirect_stderr(err):
            code = main(argv)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def create_key(config: Path, *flags: str, env: dict[str, str] | None = None) -> str:
    done = run_cli(config, "keys", "create", *flags, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def start_pod(*models: str) -> ServerProcess:
    args: list[str] = []
    for model in models:
        args += ["--model", model]
    pod = ServerProcess(*args, env={"HF_HUB_OFFLINE": "1"}).start()
    return pod


def wait_ready(pod: ServerProcess) -> None:
    wait_until(lambda: pod.get("/ready").status_code == 200, timeout_s=120, what="pod ready")


@contextlib.contextmanager
def redis_server(port: int | None = None) -> Iterator[str]:
    """The URL of a real redis-server (tests/support/redis.py); `port`: start one again where
    a stopped one was. Tests that need its process ask Redis (INFO server's process_id)."""
    with _redis_server(port) as server:
        yield server.url


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    if not postgres_installed():
        import pytest

        pytest.skip(f"PostgreSQL 15 is not installed ({PG_BIN}; Debian package postgresql)")
    with _postgres_server(prefix="gw-pg-") as dsn:
        yield dsn


def chat(gateway: ServerProcess, key: str | None, **body: Any) -> httpx.Response:
    headers = {} if key is None else {"authorization": f"Bearer {key}"}
    with httpx.Client(base_url=gateway.url, timeout=60) as client:
        return client.post("/v1/chat/completions", json=body, headers=headers)


# --- the store, in process (the CLI itself is tested in test_proxy.py; spawning it for
# every key would cost seconds per test) ----------------------------------------------
def _with_store(config_path: Path, work: Any) -> Any:
    import asyncio

    from podserve.config.gateway_config import load_gateway_config
    from podserve.gateway.stores import open_store

    config = load_gateway_config(config_path.read_text())
    if config.store.kind == "sqlite":  # relative paths resolve from the gateway's workdir
        config = config.model_copy(
            update={
                "store": config.store.model_copy(
                    update={"path": str(config_path.parent / config.store.path)}
                )
            }
        )

    async def run() -> Any:
        store = open_store(config, os.environ)
        setup = getattr(store, "setup", None)
        try:
            if setup is not None:
                await setup()
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(run())


def make_key(
    config_path: Path,
    *,
    team: str = "default",
    namespace: str = "default",
    budget_micro: int | None = None,
    rpm: int | None = None,
    tpm: int | None = None,
) -> tuple[str, str]:
    """(key, key id), stored the way `keys create` stores it."""
    import time

    from podserve.gateway.keys import KeyRecord, key_id_of, new_key

    key, digest = new_key()
    record = KeyRecord(
        key_id_of(digest),
        digest,
        team,
        namespace,
        (),
        budget_micro,
        rpm,
        tpm,
        None,
        False,
        time.time(),
    )

    async def work(store: Any) -> None:
        await store.create_key(record)

    _with_store(config_path, work)
    return key, record.key_id


def wait_for_ledger_rows(config_path: Path, key_id: str, count: int, what: str) -> None:
    """Until the ledger holds at least `count` requests of the key."""
    from tests.support.server import wait_until

    def landed() -> bool:
        row = spend_by(config_path, "key").get(key_id)
        return row is not None and row.requests >= count

    wait_until(landed, timeout_s=20, what=what)


def spend_by(config_path: Path, by: str) -> dict[str, Any]:
    """{group: SpendRow} from the ledger."""
    from podserve.gateway.store.base import Dimension

    async def work(store: Any) -> Any:
        return await store.spend(Dimension(by))

    return {row.group: row for row in _with_store(config_path, work)}


def period_key(
    period: Any = None, *, key_id: str | None = None, team: str = "t", created_at: float = 0.0
) -> Any:
    """A key record with a budget of 100 µ$ over `period` (daily when None), namespace ns,
    for the period tests; `key_id` defaults to the one its digest names."""
    from podserve.config.gateway_config import BudgetPeriod
    from podserve.gateway.keys import KeyRecord, key_id_of, new_key

    _, digest = new_key()
    return KeyRecord(
        key_id or key_id_of(digest),
        digest,
        team,
        "ns",
        (),
        100,
        None,
        None,
        None,
        False,
        created_at,
        budget_period=BudgetPeriod.DAILY if period is None else period,
    )
