"""Pure admission policies: queue bounds, slot reservations, retry hints and readiness
hysteresis."""

from podserve.admission.pressure import QueuePressure
from podserve.admission.reservations import QueueReservations, Reservation
from podserve.admission.retry import DrainRateEstimator, retry_after_header

__all__ = [
    "DrainRateEstimator",
    "QueuePressure",
    "QueueReservations",
    "Reservation",
    "retry_after_header",
]
