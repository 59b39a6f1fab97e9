"""The models of this process: states, background loading, versions, and a memory budget
with least-recently-used unloading (ModelMesh-style density).

States follow the OIP repository extension: UNAVAILABLE (known, not loaded), LOADING,
READY, UNLOADING, plus FAILED with the error kept for /ready, /startup and the index.
Loading runs on a thread so probes answer from the first second; `last_progress_s`
moves whenever a load starts or ends, which is what liveness watches during loading.

Versions: each (name, version) is its own entry; a request without a version (or with
`latest`) goes to the highest version. With a memory budget, loading a model first
unloads the least recently used idle models until it fits; a model with requests in
flight is never unloaded, and a model that cannot fit even then is refused with 503.

Loads and unloads of one model (one version) take turns, in the order they arrive, as in
Triton: a load sent while an unload waits for requests in flight waits for that unload,
then loads; an unload sent during a load waits for the load, then unloads. The state
after them is what the last request asked for, and every instance loaded is closed once.
A load or unload, once started, finishes even if its caller stops waiting: cut short, it
would leave a model LOADING or UNLOADING for good, or an instance nobody closes. So what
must follow its outcome (the data plane's record of models unloaded on purpose) is done by
the operation itself, through `on_success`, not by the caller once it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podserve.config.model_config import ModelConfig
from podserve.core.clock import Clock
from podserve.core.errors import (
    ModelLoadFailed,
    ModelNotFound,
    ModelNotReady,
    PodserveError,
    Unavailable,
)
from podserve.engine import Worker
from podserve.generation.client import EngineClient
from podserve.generation.registry import EngineServices
from podserve.repository.load_thread import run_on_own_thread
from podserve.repository.loading import fetch_source, load_and_warm, model_size_bytes
from podserve.runtimes import ModelAPI

log = logging.getLogger("podserve.repository")

# A loaded model's worker, made from what its runtime loaded: a tensor model, or a text
# generator (see engine/worker.py for the one protocol both implement).
WorkerFactory = Callable[[ModelConfig, ModelAPI | EngineClient], Worker]
LATEST = "latest"


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
    worker: Worker | None = None
    load_seconds: float | None = None
    memory_bytes: int = 0
    last_used_s: float = 0.0
    # Held by the load or unload in progress; asyncio.Lock hands it on in arrival order.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def version(self) -> str:
        return self.config.version


@dataclass(frozen=True, slots=True)
class RepositoryPolicy:
    cache_dir: Path
    autoload: bool = False
    memory_budget_bytes: int | None = None


class ModelRepository:
    def __init__(
        self,
        configs: list[ModelConfig],
        *,
        worker_factory: WorkerFactory,
        clock: Clock,
        policy: RepositoryPolicy,
        on_loaded: Callable[[ModelEntry], None] | None = None,
        on_event: Callable[[str, ModelEntry], None] | None = None,
        engines: EngineServices | None = None,
    ) -> None:
        self._entries = {(c.name, c.version): ModelEntry(c) for c in configs}
        self._latest: dict[str, str] = {}
        for name, version in self._entries:
            current = self._latest.get(name)
            if current is None or _version_key(version) > _version_key(current):
                self._latest[name] = version
        self._worker_factory = worker_factory
        self._clock = clock
        self._policy = policy
        self._on_loaded = on_loaded
        self._on_event = on_event
        self._engines = engines
        # One memory decision at a time, so two loads never both count the same free room.
        self._budget_lock = asyncio.Lock()
        # Loads and unloads whose callers may have left: held here until they finish.
        self._operations: set[asyncio.Task[None]] = set()
        self.last_progress_s = clock.now_s()

    # --- lookup ------------------------------------------------------------------------
    def knows(self, name: str) -> bool:
        return name in self._latest

    def entries(self) -> list[ModelEntry]:
        return [
            self._entries[k]
            for k in sorted(self._entries, key=lambda k: (k[0], _version_key(k[1])))
        ]

    def versions(self, name: str) -> list[str]:
        return sorted((v for n, v in self._entries if n == name), key=_version_key)

    def entry(self, name: str, version: str | None = None) -> ModelEntry:
        # Triton's words, which its clients match ("Request for unknown model"), from
        # ModelRepositoryManager::GetModel and ModelLifeCycle::GetModel
        # (github.com/triton-inference-server/core, src/model_repository_manager/); never
        # a list of the other models: any caller could read what this pod serves.
        if name not in self._latest:
            raise ModelNotFound(f"Request for unknown model: '{name}' is not found")
        resolved = self._latest[name] if version in (None, LATEST) else version
        entry = self._entries.get((name, resolved or ""))
        if entry is None:
            raise ModelNotFound(
                f"Request for unknown model: '{name}' version {version} is not found"
            )
        return entry

    def worker(self, name: str, version: str | None = None) -> Worker:
        entry = self.entry(name, version)
        if entry.state is not ModelState.READY or entry.worker is None:
            detail = f": {entry.error}" if entry.error else ""
            raise ModelNotReady(f"model {name!r} is {entry.state.value}{detail}")
        entry.last_used_s = self._clock.now_s()
        return entry.worker

    async def acquire_worker(self, name: str, version: str | None = None) -> Worker:
        """The model's worker; with autoload, a known model that is not loaded is loaded
        first (concurrent first requests wait for the same load)."""
        entry = self.entry(name, version)
        if (
            self._policy.autoload
            and entry.state in (ModelState.UNAVAILABLE, ModelState.LOADING)
            and entry.worker is None
        ):
            if self._on_event is not None:
                self._on_event("autoload", entry)
            await self.load(name, entry.version)
        return self.worker(name, entry.version)

    def workers(self) -> list[Worker]:
        return [e.worker for e in self._entries.values() if e.worker is not None]

    def used_bytes(self) -> int:
        return sum(e.memory_bytes for e in self._entries.values() if e.worker is not None)

    # --- loading -----------------------------------------------------------------------
    async def load_preloaded(self) -> None:
        """Load every `preload` model, one at a time (two large loads at once would need
        both models' peak memory together). One failure does not stop the others: the
        failed model's error stays on its entry for /startup, /ready and the index."""
        for entry in self.entries():
            if entry.config.preload:
                with contextlib.suppress(ModelLoadFailed, Unavailable):
                    await self.load(entry.name, entry.version)

    async def load(
        self, name: str, version: str | None = None, *, on_success: Callable[[], None] | None = None
    ) -> None:
        """Load the model (the latest version when none is given). `on_success` runs when
        it is READY, in the load's turn, whether or not the caller still waits."""
        entry = self.entry(name, version)
        await self._carry_out(self._load_entry(entry, on_success), "load", entry.name)

    async def _load_entry(self, entry: ModelEntry, on_success: Callable[[], None] | None) -> None:
        async with self._turn(entry, "load"):
            await self._load_held(entry)
            if on_success is not None:
                on_success()

    async def _load_held(self, entry: ModelEntry) -> None:
        """Load the model unless it is READY. The caller holds `entry.lock`."""
        name = entry.name
        if entry.state is ModelState.READY:
            return
        entry.state, entry.error = ModelState.LOADING, None
        self.last_progress_s = started = self._clock.now_s()
        log.info("loading model", extra={"model": name, "version": entry.version})
        try:
            config = entry.config
            if config.source_uri is not None:
                config = await asyncio.to_thread(fetch_source, config, self._policy.cache_dir)
                entry.config = config
                self.last_progress_s = self._clock.now_s()
            entry.memory_bytes = config.memory_bytes or model_size_bytes(config)
            await self._make_room(entry)
            # A thread that ends with the load: see load_thread.py (OpenMP teams).
            model = await run_on_own_thread(
                f"podserve-load-{name}", load_and_warm, config, self._engines
            )
        except Unavailable as exc:
            entry.state, entry.error = ModelState.UNAVAILABLE, exc.message
            raise
        except Exception as exc:
            entry.state = ModelState.FAILED
            entry.error = exc.message if isinstance(exc, PodserveError) else repr(exc)
            self.last_progress_s = self._clock.now_s()
            log.error("model failed to load", extra={"model": name, "error": entry.error})
            raise ModelLoadFailed(f"model {name!r} failed to load: {entry.error}") from exc
        entry.worker = self._worker_factory(config, model)
        entry.load_seconds = self._clock.now_s() - started
        entry.last_used_s = self._clock.now_s()
        entry.state = ModelState.READY
        self.last_progress_s = self._clock.now_s()
        log.info(
            "model ready",
            extra={
                "model": name,
                "version": entry.version,
                "load_seconds": round(entry.load_seconds, 3),
                "memory_bytes": entry.memory_bytes,
                # The startup probe must allow the observed load time plus headroom.
                "recommended_startup_budget_s": round(entry.load_seconds * 1.5, 1),
            },
        )
        if self._on_loaded is not None:
            self._on_loaded(entry)

    async def _make_room(self, entry: ModelEntry) -> None:
        budget = self._policy.memory_budget_bytes
        if budget is None:
            return
        async with self._budget_lock:
            if entry.memory_bytes > budget:
                raise Unavailable(
                    f"model {entry.name!r} needs {entry.memory_bytes} bytes, more than the "
                    f"whole memory budget of {budget} bytes",
                    reason="memory_budget",
                    retry_after_s=60,
                )
            while self.used_bytes() + entry.memory_bytes > budget:
                victim = self._least_recently_used_idle(exclude=entry)
                if victim is None:
                    busy = sorted(
                        f"{e.name}:{e.version}" for e in self._entries.values() if e.worker
                    )
                    raise Unavailable(
                        f"model {entry.name!r} ({entry.memory_bytes} bytes) does not fit the "
                        f"memory budget of {budget} bytes: {self.used_bytes()} bytes are held "
                        f"by models with requests in flight ({', '.join(busy)})",
                        reason="memory_budget",
                    )
                log.info(
                    "unloading least recently used model to make room",
                    extra={"model": victim.name, "version": victim.version, "for": entry.name},
                )
                if self._on_event is not None:
                    self._on_event("eviction", victim)
                # Not held (a model being loaded or unloaded is never picked), so this never
                # waits for a load that waits for the budget lock held here.
                async with victim.lock:
                    await self._unload_entry(victim)

    def _least_recently_used_idle(self, exclude: ModelEntry) -> ModelEntry | None:
        idle = [
            e
            for e in self._entries.values()
            if e is not exclude
            and e.state is ModelState.READY
            and not e.lock.locked()
            and e.worker is not None
            and e.worker.inflight == 0
        ]
        return min(idle, key=lambda e: e.last_used_s, default=None)

    # --- unloading ---------------------------------------------------------------------
    async def unload(
        self,
        name: str,
        version: str | None = None,
        *,
        on_success: Callable[[], None] | None = None,
    ) -> None:
        """Unload one version, or every version of the model when none is given.
        `on_success` runs once they are all unloaded, in the unload's turn, whether or not
        the caller still waits."""
        targets = (
            [self.entry(name, version)]
            if version
            else [self._entries[(name, v)] for v in self.versions(self.entry(name).name)]
        )
        await self._carry_out(self._unload_all(targets, on_success), "unload", name)

    async def _unload_all(
        self, targets: list[ModelEntry], on_success: Callable[[], None] | None
    ) -> None:
        # Every version's turn first, so a load sent while an earlier version drains waits
        # for this unload instead of finding the latest still READY. Always taken in
        # version order, so two unloads of a model cannot each hold what the other needs.
        async with contextlib.AsyncExitStack() as turns:
            for entry in targets:
                await turns.enter_async_context(self._turn(entry, "unload"))
            for entry in targets:
                await self._unload_entry(entry)
            if on_success is not None:
                on_success()

    async def _unload_entry(self, entry: ModelEntry) -> None:
        """Stop taking requests for the model, let admitted ones finish, then free it.
        The caller holds `entry.lock`."""
        worker = entry.worker
        if worker is None:
            entry.state, entry.error = ModelState.UNAVAILABLE, None
            return
        entry.state = ModelState.UNLOADING
        await worker.wait_idle()
        entry.worker = None
        try:
            await asyncio.to_thread(worker.close)
        finally:
            entry.state = ModelState.UNAVAILABLE
        log.info("model unloaded", extra={"model": entry.name, "version": entry.version})

    # --- turns -------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _turn(self, entry: ModelEntry, action: str) -> AsyncIterator[None]:
        """The model's lock, for one load or unload; says so when it has to wait, since
        the request then takes as long as the other operation plus its own."""
        if entry.lock.locked():
            log.info(
                "waiting for the model's load or unload in progress",
                extra={"model": entry.name, "version": entry.version, "action": action},
            )
        async with entry.lock:
            yield

    async def _carry_out(
        self, operation: Coroutine[Any, Any, None], action: str, name: str
    ) -> None:
        """Run a load or unload to its end even if the caller is cancelled (a gRPC deadline,
        a client gone): the caller stops waiting, the operation does not. What must follow
        the operation's outcome is its `on_success`, not code after this await, which a
        cancelled caller never runs."""
        task = asyncio.ensure_future(operation)
        self._operations.add(task)
        task.add_done_callback(self._operations.discard)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                # Said, since the model then changes state later with no request to show.
                log.info(
                    "the caller of a model load or unload left; it goes on",
                    extra={"model": name, "action": action},
                )
            task.add_done_callback(_log_unheard_failure)
            raise


def _log_unheard_failure(task: asyncio.Task[None]) -> None:
    """A load or unload whose caller left cannot answer anyone: its failure goes to the log
    (the entry keeps a load's error for /ready and the index as well)."""
    error = None if task.cancelled() else task.exception()
    if error is not None:
        log.error("model load or unload failed after its caller left", exc_info=error)


def _version_key(version: str) -> tuple[int, int | str]:
    """Numeric versions order numerically, and after any non-numeric ones."""
    return (1, int(version)) if version.isdigit() else (0, version)
