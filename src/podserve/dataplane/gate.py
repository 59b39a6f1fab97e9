"""The data plane's refusals of work it will not take, before it costs compute; the
overload refusals are counted here, in `podserve_rejected_requests_total{reason}`.

- drain: after SIGTERM every new request is refused (`Draining`, reason `draining`) with
  a Retry-After from the model's observed completion rate (admission/draining.py), which
  the data plane feeds through `completed`;
- acquiring a worker: a model this process does not serve (dataplane/model_control.py)
  is refused first; one that cannot be had now raises `Unavailable`, counted by the
  reason it carries;
- a full tensor queue, checked before an edge reads or decodes a body (`refuse_early`),
  with promised slots (`admit_early`) for the requests it lets by.

What the worker or engine refuses once a request reaches it (queue bound, deadline) the
data plane counts through `reject`, so every reason is counted in one place.
"""

from __future__ import annotations

from podserve.admission import QueueReservations, Reservation
from podserve.admission.draining import DrainingRetryHint
from podserve.core.clock import Clock
from podserve.core.errors import Draining, Unavailable
from podserve.dataplane.model_control import ModelControl
from podserve.engine import Worker
from podserve.lifecycle import Lifecycle
from podserve.obs.metrics import Metrics
from podserve.repository import ModelRepository


class AdmissionGate:
    def __init__(
        self,
        *,
        repository: ModelRepository,
        lifecycle: Lifecycle,
        metrics: Metrics,
        clock: Clock,
        model_control: ModelControl,
    ) -> None:
        self._repository = repository
        self._lifecycle = lifecycle
        self._metrics = metrics
        self._model_control = model_control
        self._draining_hint = DrainingRetryHint(clock)
        self._reservations = QueueReservations()

    def refuse_if_draining(self, model: str) -> None:
        if self._lifecycle.draining:
            self.reject(model, "draining")
            raise Draining(retry_after_s=self._draining_hint.retry_after_s(model))

    def completed(self, model: str) -> None:
        """A request or generation stream of `model` finished: the drain's Retry-After
        follows the rate at which they do."""
        self._draining_hint.completed(model)

    def refuse_early(self, model: str, version: str | None = None) -> None:
        """Refuse now, before an edge reads or decodes the body, a tensor request that
        would be refused anyway: the server is draining, the model is unknown, or its
        queue is full (issue 15 item 9: under 10x overload, reading and decoding the
        bodies of requests only to reject them took CPU the model needed). The check
        is a few attribute reads; `infer` still decides for the requests it lets by.
        Slots promised by `admit_early` count as taken."""
        self.refuse_if_draining(model)
        worker = self._tensor_worker(model, version)
        if worker is not None and self._reservations.full(
            _queue_key(worker), worker.queue_depth, worker.limits.max_queue
        ):
            raise self._queue_full(model, worker)

    def admit_early(self, model: str, version: str | None = None) -> Reservation | None:
        """`refuse_early`, and for a request it lets by, a promised queue slot: pass it
        as `CallContext.reservation` to `infer` (which releases it as the request
        enters the queue) and release it on every other path (releasing twice is a
        no-op). While bodies are read and decoded, later requests then see the slots
        as taken and are refused unread, instead of after their decode (measured:
        admission/reservations.py). None when there is no bounded tensor queue to
        promise a slot of (a generative model, a model not loaded yet)."""
        self.refuse_if_draining(model)
        worker = self._tensor_worker(model, version)
        if worker is None:
            return None
        reservation = self._reservations.reserve(
            _queue_key(worker), worker.queue_depth, worker.limits.max_queue
        )
        if reservation is None:
            raise self._queue_full(model, worker)
        return reservation

    async def acquire(self, model: str, version: str | None) -> Worker:
        self._model_control.check_served(model)
        try:
            return await self._repository.acquire_worker(model, version)
        except Unavailable as exc:
            self.reject(model, exc.reason)
            raise

    def reject(self, model: str, reason: str) -> None:
        self._metrics.rejected.labels(model, reason).inc()

    def _tensor_worker(self, model: str, version: str | None) -> Worker | None:
        """The loaded tensor worker of `model` (ModelNotFound for an unknown one); None
        while it is not loaded, or for a generative model (its engine admits)."""
        worker = self._repository.entry(model, version).worker
        if worker is None or worker.generator is not None:
            return None
        return worker

    def _queue_full(self, model: str, worker: Worker) -> Unavailable:
        self.reject(model, "queue_full")
        return Unavailable(
            f"model {model!r} queue is full ({worker.limits.max_queue} waiting); "
            "retry later or on another replica",
            reason="queue_full",
        )


def _queue_key(worker: Worker) -> str:
    return f"{worker.name}/{worker.version}"
