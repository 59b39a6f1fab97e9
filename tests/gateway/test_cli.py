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
    ],
)
def test_bad_key_flags_exit_2(
    config: Path, capsys: pytest.CaptureFixture[str], flags: list[str], needle: str
) -> None:
    code, _, err = _run(capsys, "gateway", "keys", "create", "--config", str(config), *flags)
    assert code == 2
    assert needle in err


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
