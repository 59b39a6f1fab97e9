"""Settings precedence (flags > env > file > defaults) through the real CLI parser, and
model-config errors that name the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from podserve.cli.main import build_parser
from podserve.cli.serve import settings_from_args
from podserve.config.model_config import load_model_config
from podserve.core.errors import InvalidInput


def _settings(argv: list[str]):  # type: ignore[no-untyped-def]
    return settings_from_args(build_parser().parse_args(["serve", *argv]))


def test_flags_beat_env_beat_file_beat_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text("max_queue: 11\ndrain_timeout_s: 7\nport: 9100\nlog_format: console\n")
    monkeypatch.setenv("PODSERVE_MAX_QUEUE", "22")
    monkeypatch.setenv("PODSERVE_DRAIN_TIMEOUT_S", "8")
    settings = _settings(["--config", str(settings_file), "--max-queue", "33"])
    assert settings.max_queue == 33  # flag
    assert settings.drain_timeout_s == 8  # env over file
    assert settings.port == 9100  # file over default
    assert settings.log_format == "console"
    assert settings.grpc_port == 8001  # default


def test_models_from_flags_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PODSERVE_MODELS", "a=/m/a.onnx,b=/m/b:sklearn")
    from_env = _settings([])
    assert [(m.name, str(m.path), m.runtime) for m in from_env.models] == [
        ("a", "/m/a.onnx", None),
        ("b", "/m/b", "sklearn"),
    ]
    from_flags = _settings(["--model", "c=/m/c.skops", "--model", "d=/m/d:onnx"])
    assert [m.name for m in from_flags.models] == ["c", "d"]


def test_invalid_settings_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PODSERVE_READY_LOW_WATERMARK", "0.95")
    with pytest.raises(ValueError, match="ready_low_watermark must be below"):
        _settings([])


def test_model_config_errors_name_file_and_field(tmp_path: Path) -> None:
    (tmp_path / "model.yaml").write_text("runtime: fake\nbatching: {max_batch_size: 0}\nbogus: 1\n")
    with pytest.raises(InvalidInput) as info:
        load_model_config(tmp_path)
    message = info.value.message
    assert str(tmp_path / "model.yaml") in message
    assert "batching.max_batch_size" in message
    assert "bogus" in message
