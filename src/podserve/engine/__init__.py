"""The loop that runs a model: queue → batch policy → worker threads → results; and the
`Worker` protocol every served model implements."""

from podserve.engine.model_worker import ModelWorker, WorkerLimits
from podserve.engine.worker import Worker, WorkerLimitsView

__all__ = ["ModelWorker", "Worker", "WorkerLimits", "WorkerLimitsView"]
