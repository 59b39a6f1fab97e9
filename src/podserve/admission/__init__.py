"""Pure admission policies: queue bounds, retry hints and readiness hysteresis."""

from podserve.admission.pressure import QueuePressure
from podserve.admission.retry import DrainRateEstimator, retry_after_header

__all__ = ["DrainRateEstimator", "QueuePressure", "retry_after_header"]
