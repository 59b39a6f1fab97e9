"""What the state gauges report, read at scrape time (`obs/collector.py`, which says why
they are read from state rather than set): readiness and drain from the lifecycle, and
per model its queue, in-flight requests and generation engine from the repository."""

from __future__ import annotations

from podserve.lifecycle import Lifecycle
from podserve.obs.collector import GenerationState, ModelServingState, ServingState
from podserve.repository import ModelRepository, ModelState


def serving_state(repository: ModelRepository, lifecycle: Lifecycle) -> ServingState:
    models = []
    for entry in repository.entries():
        worker = entry.worker
        if worker is None:
            models.append(ModelServingState(entry.name, entry.version, loaded=False))
            continue
        generation = None
        if worker.generator is not None:
            stats = worker.generator.stats()
            generation = GenerationState(
                running=stats.num_running,
                waiting=stats.num_waiting,
                kv_usage_ratio=stats.kv_usage_ratio,
                preemptions_total=stats.num_preemptions,
            )
        models.append(
            ModelServingState(
                entry.name,
                entry.version,
                loaded=entry.state is ModelState.READY,
                queue_depth=worker.queue_depth,
                inflight=worker.inflight,
                generation=generation,
            )
        )
    return ServingState(
        ready=lifecycle.ready().ok,
        draining=lifecycle.draining,
        memory_bytes=repository.used_bytes(),
        models=tuple(models),
    )
