"""Text engines by runtime name, registered like runtimes (`runtimes/registry.py`).

A text engine is one module that declares a `TextEngine`: its runtime name (what
model.yaml's `runtime:` says), its typed `parameters:` model (a `RuntimeParameters`,
`extra="forbid"`, validated at load so a typo fails naming the key) and a factory that
loads the model and returns a `generation.client.EngineClient`. The repository loads
any registered engine through `load_engine`, the data plane serves whatever
`EngineClient` comes back behind `generation.served.EngineWorker`: neither names an
engine. Built-in engines are imported lazily by path, so a heavy engine (torch,
vLLM) costs nothing until a model names it; others are added with `register_engine`
(a plug-in module, or a test).

The factory is blocking and runs on a load thread: load weights, warm up, start any
step thread, then return. It receives an `EngineContext`: the model's config, its
validated parameters, its token metrics (observe them where tokens are produced), the
clock and the queue bound (the model's `limits.max_queue`, else the server's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from podserve.config.model_config import ModelConfig
from podserve.core.clock import MONOTONIC, Clock
from podserve.core.errors import ModelLoadFailed
from podserve.generation.client import EngineClient
from podserve.obs.metrics import GenerationMetrics, Metrics
from podserve.runtimes.parameters import RuntimeParameters, validate_parameters
from podserve.runtimes.registry import import_object

P = TypeVar("P", bound=RuntimeParameters)

# The queue bound when neither the model nor the server sets one (ServerSettings.max_queue).
DEFAULT_MAX_QUEUE = 256


@dataclass(frozen=True, slots=True)
class EngineContext(Generic[P]):
    """What an engine's factory gets: everything it needs, nothing it must look up."""

    config: ModelConfig
    parameters: P
    metrics: GenerationMetrics
    clock: Clock
    max_queue: int


@dataclass(frozen=True, slots=True)
class TextEngine(Generic[P]):
    """One text engine: its runtime name, its `parameters:` model and its factory."""

    name: str
    parameters: type[P]
    create: Callable[[EngineContext[P]], EngineClient]


@dataclass(frozen=True, slots=True)
class EngineServices:
    """What the serving process lends every engine it loads: token metrics per model
    (bound to the process's registry), the clock and the server-wide queue bound."""

    metrics: Callable[[str], GenerationMetrics]
    clock: Clock = MONOTONIC
    default_max_queue: int = DEFAULT_MAX_QUEUE


def standalone_services() -> EngineServices:
    """Services for a caller outside a server (a batch job, a benchmark): a private
    metrics registry nobody scrapes."""
    metrics = Metrics()
    return EngineServices(metrics=metrics.for_generation)


_BUILTIN: dict[str, str] = {
    "transformers": "podserve.generation.inhouse:ENGINE",
}
_REGISTERED: dict[str, TextEngine[Any]] = {}


def register_engine(engine: TextEngine[Any]) -> None:
    """Make `engine.name` a runtime a model.yaml may name."""
    if engine.name in _BUILTIN or engine.name in _REGISTERED:
        raise ValueError(f"a text engine named {engine.name!r} is already registered")
    _REGISTERED[engine.name] = engine


def unregister_engine(name: str) -> None:
    """Remove an engine added with `register_engine` (built-ins stay)."""
    _REGISTERED.pop(name, None)


def known_engines() -> tuple[str, ...]:
    return tuple(sorted({*_BUILTIN, *_REGISTERED}))


def is_generative(runtime: str) -> bool:
    """Whether `runtime` names a text engine (its requests go to `generate`)."""
    return runtime in _REGISTERED or runtime in _BUILTIN


def text_engine(runtime: str) -> TextEngine[Any]:
    engine = _REGISTERED.get(runtime)
    if engine is not None:
        return engine
    try:
        path = _BUILTIN[runtime]
    except KeyError:
        raise ModelLoadFailed(
            f"unknown text engine {runtime!r}; known: {', '.join(known_engines())}"
        ) from None
    loaded = import_object(path)
    if not isinstance(loaded, TextEngine):
        raise ModelLoadFailed(f"{path} is not a podserve.generation.registry.TextEngine")
    return loaded


def load_engine(config: ModelConfig, services: EngineServices) -> EngineClient:
    """Validate the model's parameters against its engine's model, then load it."""
    engine = text_engine(config.runtime)
    parameters = validate_parameters(
        engine.parameters, config.parameters, model=config.name, runtime=config.runtime
    )
    return engine.create(
        EngineContext(
            config=config,
            parameters=parameters,
            metrics=services.metrics(config.name),
            clock=services.clock,
            max_queue=config.limits.max_queue or services.default_max_queue,
        )
    )
