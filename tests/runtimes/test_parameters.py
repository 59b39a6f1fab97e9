"""model.yaml `parameters:` are typed per runtime and checked at load (issue 13, bug 5):
a typo fails the load naming the key and the keys the runtime takes, instead of being
silently ignored; the reference tables in docs/runtimes.md are generated from the same
models."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from podserve.config.model_config import ModelConfig, load_model_config
from podserve.core.clock import FakeClock
from podserve.core.errors import ModelLoadFailed
from podserve.generation.loading import load_generator
from podserve.repository import ModelRepository, ModelState, RepositoryPolicy
from podserve.repository.loading import load_and_warm
from podserve.runtimes import LoadContext, ModelAPI, Payload
from podserve.runtimes.parameters import (
    BUILTIN_PARAMETERS,
    OpenParameters,
    RuntimeParameters,
    validate_parameters,
)
from podserve.runtimes.registry import _BUILTIN, import_object
from tests.lifecycle.stub_worker import StubWorker
from tests.support.server import write_model

ROOT = Path(__file__).resolve().parents[2]


async def test_a_typo_fails_the_load_naming_the_key_and_the_allowed_keys(
    tmp_path: Path,
) -> None:
    write_model(tmp_path, "m", parameters={"delay_sec": 1}, warmup=False)
    repository = ModelRepository(
        [load_model_config(tmp_path / "m")],
        worker_factory=lambda config, model: StubWorker(config.name),
        clock=FakeClock(),
        policy=RepositoryPolicy(cache_dir=tmp_path / "cache"),
    )
    with pytest.raises(ModelLoadFailed) as failed:
        await repository.load("m")
    message = failed.value.message
    assert "unknown parameter 'delay_sec'" in message
    assert "runtime 'fake' takes: delay_s, fail_value, hang_value" in message
    entry = repository.entry("m")
    assert entry.state is ModelState.FAILED
    assert entry.error is not None
    assert "delay_sec" in entry.error  # what /ready and the repository index report


def test_a_wrong_value_names_the_key_and_the_rule(tmp_path: Path) -> None:
    write_model(tmp_path, "m", parameters={"delay_s": -1}, warmup=False)
    with pytest.raises(ModelLoadFailed, match="parameter 'delay_s': Input should be greater"):
        load_and_warm(load_model_config(tmp_path / "m"))


def test_generation_parameters_are_checked_before_anything_loads(tmp_path: Path) -> None:
    config = ModelConfig(
        name="lm", runtime="transformers", parameters={"max_num_seq": 4}, directory=tmp_path
    )
    with pytest.raises(ModelLoadFailed, match=r"unknown parameter 'max_num_seq'.*max_num_seqs"):
        load_generator(config)


@pytest.mark.parametrize("runtime", sorted(_BUILTIN))
def test_every_builtin_runtime_declares_strict_parameters(runtime: str) -> None:
    cls = import_object(_BUILTIN[runtime])
    assert isinstance(cls, type)
    assert issubclass(cls, ModelAPI)
    assert cls.Parameters is BUILTIN_PARAMETERS[runtime]
    assert cls.Parameters.model_config.get("extra") == "forbid"
    with pytest.raises(ModelLoadFailed, match="unknown parameter 'surely_a_typo'"):
        validate_parameters(cls.Parameters, {"surely_a_typo": 1}, model="m", runtime=runtime)


class Tuned(RuntimeParameters):
    threshold: float = 0.5


class UserModel(ModelAPI):
    Parameters = Tuned

    def load(self, context: LoadContext) -> None:
        self.threshold = context.options_as(Tuned).threshold

    def predict(self, batch: Payload) -> Payload:
        return batch


def test_user_models_may_declare_their_own_parameters(tmp_path: Path) -> None:
    config = ModelConfig(name="u", runtime="custom", parameters={"threshold": 0.8})
    model = UserModel()
    model.load(LoadContext(config, tmp_path))
    assert model.threshold == 0.8
    typo = ModelConfig(name="u", runtime="custom", parameters={"treshold": 0.8})
    with pytest.raises(ModelLoadFailed, match="unknown parameter 'treshold'"):
        UserModel().load(LoadContext(typo, tmp_path))
    # a user model that declares nothing takes anything, as before
    assert ModelAPI.Parameters is OpenParameters


def test_the_docs_tables_are_generated_from_the_models() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts/gen_runtime_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    text = (ROOT / "docs" / "runtimes.md").read_text()
    for runtime in BUILTIN_PARAMETERS:
        assert f"<!-- parameters: {runtime} (generated" in text
