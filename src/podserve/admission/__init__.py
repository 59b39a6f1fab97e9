"""Pure admission policies: queue bounds, retry hints and readiness hysteresis."""

from podserve.admission.pressure import QueuePressure
from podserve.admission.retry import DrainRateEstimator

__all__ = ["DrainRateEstimator", "QueuePressure"]
