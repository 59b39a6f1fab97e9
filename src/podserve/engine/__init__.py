"""The loop that runs a model: queue → batch policy → worker threads → results."""

from podserve.engine.model_worker import ModelWorker, WorkerLimits

__all__ = ["ModelWorker", "WorkerLimits"]
