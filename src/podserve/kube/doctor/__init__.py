"""`podserve doctor`: why a serving pod is unhealthy, from its manifest, its events and its
logs — each diagnosis with the evidence lines it rests on and the fix."""

from podserve.kube.doctor.checks import ALL_CHECKS, diagnose
from podserve.kube.doctor.model import Diagnosis, PodDump

__all__ = ["ALL_CHECKS", "Diagnosis", "PodDump", "diagnose"]
