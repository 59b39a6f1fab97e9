"""Generative models: a transformers executor driven by `podserve.scheduling` (DESIGN.md §4).

torch and transformers are imported lazily, inside the executor, so importing this
package costs nothing when the extra is not installed.
"""

from podserve.generation.engine import EngineStats, GenerationEngine
from podserve.generation.executor import ModelExecutor
from podserve.generation.sampling import Sampler, SamplingParams
from podserve.generation.stream import FinishReason, RequestStream, TokenEvent

__all__ = [
    "EngineStats",
    "FinishReason",
    "GenerationEngine",
    "ModelExecutor",
    "RequestStream",
    "Sampler",
    "SamplingParams",
    "TokenEvent",
]
