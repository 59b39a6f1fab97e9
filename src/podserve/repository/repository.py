"""Model states and background loading.

States follow the OIP repository extension: UNAVAILABLE (known, not loaded), LOADING,
READY, UNLOADING, plus FAILED with the error kept for /ready, /startup and the index.
Loading runs on a thread so probes answer from the first second; `last_progress_s`
moves whenever a load starts or ends, which is what liveness watches during loading.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass

from podserve.config.model_config import ModelConfig
from podserve.core.clock import Clock
from podserve.core.errors import ModelLoadFailed, ModelNotFound, ModelNotReady, PodserveError
from podserve.engine import ModelWorker
from podserve.runtimes import LoadContext, ModelAPI, create_model

log = logging.getLogger("podserve.repository")

WorkerFactory = Callable[[ModelConfig, ModelAPI], ModelWorker]


class ModelState(enum.StrEnum):
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    FAILED = "FAILED"


@dataclass(slots=True)
class ModelEntry:
    config: ModelConfig
    state: ModelState = ModelState.UNAVAILABLE
    error: str | None = None
    worker: ModelWorker | None = None
    load_seconds: float | None = None

    @property
    def name(self) -> str:
        return self.config.name


class ModelRepository:
    def __init__(
        self,
        configs: list[ModelConfig],
        *,
        worker_factory: WorkerFactory,
        clock: Clock,
        on_loaded: Callable[[ModelEntry], None] | None = None,
    ) -> None:
        self._entries = {c.name: ModelEntry(c) for c in configs}
        self._worker_factory = worker_factory
        self._clock = clock
        self._on_loaded = on_loaded
        self._locks: dict[str, asyncio.Lock] = {}
        self.last_progress_s = clock.now_s()

    def knows(self, name: str) -> bool:
        return name in self._entries

    def entries(self) -> list[ModelEntry]:
        return [self._entries[n] for n in sorted(self._entries)]

    def entry(self, name: str, version: str | None = None) -> ModelEntry:
        entry = self._entries.get(name)
        if entry is None or (version is not None and version != entry.config.version):
            label = name if version is None else f"{name} version {version}"
            raise ModelNotFound(f"unknown model {label!r}; known: {sorted(self._entries)}")
        return entry

    def worker(self, name: str, version: str | None = None) -> ModelWorker:
        entry = self.entry(name, version)
        if entry.state is not ModelState.READY or entry.worker is None:
            detail = f": {entry.error}" if entry.error else ""
            raise ModelNotReady(f"model {name!r} is {entry.state.value}{detail}")
        return entry.worker

    def workers(self) -> list[ModelWorker]:
        return [e.worker for e in self._entries.values() if e.worker is not None]

    async def load_preloaded(self) -> None:
        """Load every `preload` model, one at a time (two large loads at once would need
        both models' peak memory together). One failure does not stop the others: the
        failed model's error stays on its entry for /startup, /ready and the index."""
        for entry in self.entries():
            if entry.config.preload:
                with contextlib.suppress(ModelLoadFailed):
                    await self.load(entry.name)

    async def load(self, name: str) -> None:
        entry = self.entry(name)
        async with self._lock(name):
            if entry.state is ModelState.READY:
                return
            entry.state, entry.error = ModelState.LOADING, None
            self.last_progress_s = started = self._clock.now_s()
            log.info("loading model", extra={"model": name, "runtime": entry.config.runtime})
            try:
                model = await asyncio.to_thread(_load_and_warm, entry.config)
            except Exception as exc:
                entry.state = ModelState.FAILED
                entry.error = exc.message if isinstance(exc, PodserveError) else repr(exc)
                self.last_progress_s = self._clock.now_s()
                log.error("model failed to load", extra={"model": name, "error": entry.error})
                raise ModelLoadFailed(f"model {name!r} failed to load: {entry.error}") from exc
            entry.worker = self._worker_factory(entry.config, model)
            entry.load_seconds = self._clock.now_s() - started
            entry.state = ModelState.READY
            self.last_progress_s = self._clock.now_s()
            log.info(
                "model ready",
                extra={
                    "model": name,
                    "load_seconds": round(entry.load_seconds, 3),
                    # The startup probe must allow the observed load time plus headroom.
                    "recommended_startup_budget_s": round(entry.load_seconds * 1.5, 1),
                },
            )
            if self._on_loaded is not None:
                self._on_loaded(entry)

    async def unload(self, name: str) -> None:
        """Stop taking requests for the model, let admitted ones finish, then free it."""
        entry = self.entry(name)
        async with self._lock(name):
            worker = entry.worker
            if worker is None:
                entry.state, entry.error = ModelState.UNAVAILABLE, None
                return
            entry.state = ModelState.UNLOADING
            await worker.wait_idle()
            entry.worker = None
            await asyncio.to_thread(worker.close)
            entry.state = ModelState.UNAVAILABLE
            log.info("model unloaded", extra={"model": name})

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())


def _load_and_warm(config: ModelConfig) -> ModelAPI:
    model = create_model(config)
    directory = config.directory or config.artifact_path().parent
    model.load(LoadContext(config=config, directory=directory, parameters=config.parameters))
    if config.warmup:
        request = model.warmup_request(config.name)
        if request is not None:
            model.validate(request)
            model.postprocess(model.predict(model.preprocess(request)), request)
    return model
