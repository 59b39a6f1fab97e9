"""Runtimes: one module per framework behind the `ModelAPI` contract. Heavy framework
imports happen inside each runtime's `load`, never at package import."""

from podserve.runtimes.base import LoadContext, ModelAPI, Payload
from podserve.runtimes.registry import create_model, known_runtimes

__all__ = ["LoadContext", "ModelAPI", "Payload", "create_model", "known_runtimes"]
