"""`podserve gateway keys|spend` in process: bad input exits 2 with a message, a key is
printed once on the last line, list never shows it, spend prints the contract's JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podserve.cli.main import main
from tests.gateway.support import ROOT


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.yaml"
    text = (ROOT / "examples/gateway/gateway.yaml").read_text()
    path.write_text(text.replace("path: gateway.db", f"path: {tmp_path / 'gw.db'}"))
    return path


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as exit_:  # argparse refuses a bad choice itself
        code = int(exit_.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_period_choices_are_the_budget_periods() -> None:
    from podserve.cli.gateway import _PERIODS
    from podserve.config.gateway_config import BudgetPeriod

    assert tuple(p.value for p in BudgetPeriod) == _PERIODS


def test_keys_create_list_revoke(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys,
        "gateway",
        "keys",
        "create",
        "--config",
        str(config),
        "--team",
        "a",
        "--namespace",
        "ns",
        "--budget-usd",
        "2.5",
        "--rpm",
        "10",
        "--tpm",
        "1000",
        "--models",
        "tiny-lm",
    )
    assert code == 0
    key = out.strip().splitlines()[-1]
    assert key.startswith("psk-")
    code, out, _ = _run(
        capsys, "gateway", "keys", "list", "--config", str(config), "--format", "json"
    )
    assert code == 0
    [row] = json.loads(out)
    assert key not in out
    assert row["budget_usd"] == 2.5
    assert (row["team"], row["namespace"], row["models"], row["rpm"], row["tpm"]) == (
        "a",
        "ns",
        ["tiny-lm"],
        10,
        1000,
    )
    assert _run(capsys, "gateway", "keys", "revoke", "--config", str(config), row["key_id"])[0] == 0
    code, _, err = _run(capsys, "gateway", "keys", "revoke", "--config", str(config), "nope")
    assert code == 1
    assert "nope" in err


def test_a_key_with_a_monthly_budget(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    create = ("gateway", "keys", "create", "--config", str(config), "--budget-usd", "3")
    assert _run(capsys, *create, "--budget-period", "monthly")[0] == 0
    assert _run(capsys, *create)[0] == 0  # lifetime unless asked
    code, out, _ = _run(
        capsys, "gateway", "keys", "list", "--config", str(config), "--format", "json"
    )
    assert code == 0
    assert sorted(row["budget_period"] for row in json.loads(out)) == ["lifetime", "monthly"]
    code, out, _ = _run(capsys, "gateway", "keys", "list", "--config", str(config))
    assert "monthly" in out
    assert "lifetime" in out


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--budget-usd", "lots"], "--budget-usd"),
        (["--budget-usd", "-1"], "--budget-usd"),
        (["--rpm", "0"], "--rpm"),
        (["--models", "gpt-9"], "gpt-9"),
        (["--budget-period", "yearly"], "--budget-period"),
        # past 2**63 micro-dollars: an OverflowError traceback before
        (["--budget-usd", "1e30"], "--budget-usd"),
        # an empty list means every model: a restriction that names none must not be one
        (["--models", ","], "--models names no model"),
        # `team:search@2026-12` was team `search`'s December budget scope
        (["--team", "search@2026-12"], "--team"),
        (["--namespace", "a{b}"], "--namespace"),
        (["--team", ""], "--team"),
        # past 2**63 the store raised OverflowError: a traceback, exit 1
        (["--rpm", "100000000000000000000"], "--rpm must be from 1 to 2147483647"),
        (["--tpm", "9223372036854775808"], "--tpm must be from 1 to 2147483647"),
        # nan made a key that never expired; -1 and 0 one expired at birth; 1e308 days,
        # an infinite expiry that `keys list --format json` printed as `Infinity`
        (["--expires-in-days", "nan"], "--expires-in-days"),
        (["--expires-in-days", "inf"], "--expires-in-days"),
        (["--expires-in-days", "-1"], "--expires-in-days"),
        (["--expires-in-days", "0"], "--expires-in-days"),
        (["--expires-in-days", "1e308"], "--expires-in-days"),
    ],
)
def test_bad_key_flags_exit_2(
    config: Path, capsys: pytest.CaptureFixture[str], flags: list[str], needle: str
) -> None:
    code, out, err = _run(capsys, "gateway", "keys", "create", "--config", str(config), *flags)
    assert code == 2
    assert needle in err
    assert "psk-" not in out  # no key was made


@pytest.mark.parametrize("grace", ["-1", "nan", "inf", "soon"])
def test_a_bad_rotation_grace_exits_2(
    config: Path, capsys: pytest.CaptureFixture[str], grace: str
) -> None:
    code, out, err = _run(
        capsys, "gateway", "keys", "rotate", "--config", str(config), "k", "--grace-s", grace
    )
    assert code == 2
    assert "--grace-s" in err
    assert "psk-" not in out  # no key was made


def test_bad_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: [{name: a}]\n")
    code, _, err = _run(capsys, "gateway", "spend", "--config", str(bad), "--by", "team")
    assert code == 2
    assert "pools" in err
    code, _, err = _run(
        capsys, "gateway", "spend", "--config", str(tmp_path / "missing.yaml"), "--by", "team"
    )
    assert code == 2
    assert "missing.yaml" in err


def test_spend_for_the_current_period(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio
    import time

    from podserve.gateway.budget import Usage
    from podserve.gateway.store.base import Charge, Labels, Outcome, Settlement
    from podserve.gateway.store.sqlite import SqliteStore

    async def record() -> None:  # one request settled two days ago, one now
        store = SqliteStore(config.parent / "gw.db")
        now = time.time()
        for rid, at, cost in (("old", now - 2 * 86_400, 7), ("new", now, 5)):
            settled = Settlement(rid, Usage(1, 1), cost, "pool", Outcome.OK, at)
            await store.charge(Charge(settled, ("team:a",), Labels("k", "a", "ns", "tiny-lm")))
        await store.close()

    asyncio.run(record())
    spend = ("gateway", "spend", "--config", str(config), "--by", "team", "--format", "json")
    code, out, _ = _run(capsys, *spend)
    assert code == 0
    assert [(r["team"], r["requests"]) for r in json.loads(out)] == [("a", 2)]
    code, out, _ = _run(capsys, *spend, "--period", "daily")
    assert code == 0
    assert [(r["team"], r["requests"], r["spend_usd"]) for r in json.loads(out)] == [
        ("a", 1, 0.000005)
    ]
    code, _, err = _run(capsys, *spend, "--period", "hourly")
    assert code == 2
    assert "--period" in err


def test_spend_on_an_empty_ledger(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys, "gateway", "spend", "--config", str(config), "--by", "model", "--format", "json"
    )
    assert code == 0
    assert json.loads(out) == []


def test_keys_list_shows_expiry_limits_and_models(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The text listing called an expired key `active` and showed none of models, rpm,
    tpm or expiry; the JSON rows keep their keys."""
    import asyncio
    import time

    from podserve.gateway.keys import KeyRecord, key_id_of, new_key
    from podserve.gateway.store.sqlite import SqliteStore

    now = time.time()
    records = []
    for team, expires_at in (("lapsed", now - 3600), ("current", now + 30 * 86_400)):
        _, digest = new_key()
        records.append(
            KeyRecord(
                key_id_of(digest), digest, team, "ns", ("tiny-lm",), None, 7, 900,
                expires_at, False, now,
            )
        )  # fmt: skip

    async def store_keys() -> None:
        store = SqliteStore(config.parent / "gw.db")
        for record in records:
            await store.create_key(record)
        await store.close()

    asyncio.run(store_keys())
    code, out, _ = _run(capsys, "gateway", "keys", "list", "--config", str(config))
    assert code == 0
    header, *lines = out.splitlines()
    assert header.split() == [
        "KEY", "ID", "TEAM", "NAMESPACE", "BUDGET", "USD", "PERIOD", "RPM", "TPM", "EXPIRES",
        "(UTC)", "STATUS", "MODELS",
    ]  # fmt: skip
    rows = {line.split()[1]: line.split() for line in lines}
    lapsed = time.strftime("%Y-%m-%d %H:%M", time.gmtime(now - 3600)).split()
    assert rows["lapsed"][-7:] == ["lifetime", "7", "900", *lapsed, "expired", "tiny-lm"]
    assert rows["current"][-2:] == ["active", "tiny-lm"]
    code, out, _ = _run(
        capsys, "gateway", "keys", "list", "--config", str(config), "--format", "json"
    )
    assert code == 0
    assert {tuple(sorted(row)) for row in json.loads(out)} == {
        (
            "budget_period", "budget_usd", "expires_at", "key_id", "models", "namespace",
            "revoked", "rpm", "team", "tpm",
        )
    }  # fmt: skip


_UNSET = "PODSERVE_TEST_UNSET_VARIABLE"


def _store_config(tmp_path: Path, store: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(f"store: {store}\npools: [{{name: a, models: [m], endpoints: ['http://x']}}]\n")
    return path


_BAD_STORES = [
    # a traceback each, exit 1: sqlite3's "unable to open database file"; redis-py's
    # ValueError; "the Redis URL or PostgreSQL DSN env var is not set", naming neither
    ("{kind: sqlite, path: /nonexistent/dir/gw.db}", "the directory /nonexistent/dir"),
    (
        f"{{kind: redis-postgres, redisEnv: {_UNSET}, postgres: 'postgresql://p/db'}}",
        f"store.redisEnv: the environment variable {_UNSET} is not set",
    ),
    (
        f"{{kind: redis-postgres, redis: 'redis://r:6379/0', postgresEnv: {_UNSET}}}",
        f"store.postgresEnv: the environment variable {_UNSET} is not set",
    ),
    (
        "{kind: redis-postgres, redis: 'r:6379', postgres: 'postgresql://p/db'}",
        "the Redis URL must start with redis://",
    ),
]


@pytest.mark.parametrize(("store", "needle"), _BAD_STORES)
def test_a_store_setting_that_cannot_work_exits_2_from_the_keys_commands(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    store: str,
    needle: str,
) -> None:
    monkeypatch.delenv(_UNSET, raising=False)
    config = _store_config(tmp_path, store)
    code, _, err = _run(capsys, "gateway", "keys", "list", "--config", str(config))
    assert (code, err.count("\n")) == (2, 1)
    assert needle in err


def _serve(config: Path, env: dict[str, str]) -> tuple[int | None, str]:
    """Start the real `podserve gateway`: (its exit code, stderr), or (None, stderr so far)
    when it started serving instead (it is stopped then)."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "podserve.cli.main", "gateway", "--config", str(config)]
    cmd += ["--host", "127.0.0.1", "--port", "0"]
    environ = {k: v for k, v in os.environ.items() if k != _UNSET} | env
    with subprocess.Popen(
        cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=environ
    ) as proc:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if "podserve gateway listening" in line:
                proc.kill()
                return None, "".join(seen)
        return proc.wait(timeout=60), "".join(seen)


@pytest.mark.parametrize(("store", "needle"), _BAD_STORES)
def test_a_store_setting_that_cannot_work_stops_the_gateway_at_start(
    tmp_path: Path, store: str, needle: str
) -> None:
    code, err = _serve(_store_config(tmp_path, store), {})
    assert code == 2, err
    assert needle in err
    assert "Traceback" not in err


def _hosted_config(tmp_path: Path, **price: str) -> Path:
    path = tmp_path / "gateway.yaml"
    fallback = f"{{name: hosted, baseUrl: 'http://127.0.0.1:9/v1', apiKeyEnv: {_UNSET}, "
    path.write_text(
        f"store: {{kind: sqlite, path: {tmp_path / 'gw.db'}}}\n"
        f"fallbacks: [{fallback}models: [tiny-lm]}}]\n"
        f"prices: {{tiny-lm: {json.dumps({'gpuHourUsd': 1, 'tokensPerSecond': 1, **price})}}}\n"
    )
    return path


@pytest.mark.parametrize(
    ("key", "needle"),
    [
        # started with a warning, then sent every request with no Authorization header
        (None, f"the environment variable {_UNSET} is not set: requests to hosted"),
        ("", f"the environment variable {_UNSET} is not set"),
        # a Secret made from a file with its newline: every request was a 500
        ("sk-abc\n", f"the environment variable {_UNSET} holds a control character"),
        ("sk-abc\r\nX-Injected: 1", f"the environment variable {_UNSET} holds a control"),
        # UnicodeEncodeError in the forwarder: a traceback
        ("sk-ключ", f"the environment variable {_UNSET} holds a character outside"),
    ],
)
def test_a_fallback_api_key_no_request_can_carry_stops_the_gateway_at_start(
    tmp_path: Path, key: str | None, needle: str
) -> None:
    env = {} if key is None else {_UNSET: key}
    code, err = _serve(_hosted_config(tmp_path), env)
    assert code == 2, err
    assert f"fallbacks[hosted].apiKeyEnv: {needle}" in err
    if key:
        assert key.strip() not in err  # never the key itself


def test_a_tokenizer_that_cannot_load_stops_the_gateway_at_start(tmp_path: Path) -> None:
    """It was loaded at the model's first request: the gateway started, then answered
    every request for the model with a 500."""
    missing = tmp_path / "nowhere" / "tokenizer.json"
    config = _hosted_config(tmp_path, tokenizer=str(missing))
    code, err = _serve(config, {_UNSET: "sk-test"})
    assert code == 2, err
    assert f"prices.tiny-lm.tokenizer: cannot load {missing}" in err
    # `keys` and `spend` need no tokenizer (nor the hosted key): they still work
    assert main(["gateway", "spend", "--config", str(config), "--by", "team"]) == 0


def test_a_gateway_with_everything_it_needs_starts(tmp_path: Path) -> None:
    from tests.gateway.support import TINY_LM

    config = _hosted_config(tmp_path, tokenizer=str(TINY_LM / "tokenizer.json"))
    code, err = _serve(config, {_UNSET: "sk-test"})
    assert code is None, err
