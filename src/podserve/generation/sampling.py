"""Sampling parameters and the sampler over one logits row.

A request with a `seed` draws from its own `torch.Generator`, so what it samples depends
only on its own logits and seed, never on which requests shared its step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from podserve.core.errors import InvalidInput

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 means no top-k filter
    seed: int | None = None
    max_tokens: int = 16
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise InvalidInput(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise InvalidInput(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise InvalidInput(f"top_k must be >= 0, got {self.top_k}")
        if self.max_tokens < 1:
            raise InvalidInput(f"max_tokens must be >= 1, got {self.max_tokens}")
        if any(not s for s in self.stop):
            raise InvalidInput("stop strings must not be empty")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


class Sampler:
    """Picks the next token of one request from its logits row (shape `[vocab]`)."""

    __slots__ = ("_generator", "params")

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self._generator: torch.Generator | None = None
        if params.seed is not None and not params.greedy:
            import torch

            self._generator = torch.Generator().manual_seed(params.seed)

    def sample(self, logits: torch.Tensor) -> int:
        import torch

        params = self.params
        if params.greedy:
            return int(torch.argmax(logits).item())
        scores = logits.float() / params.temperature
        if params.top_k and params.top_k < scores.shape[-1]:
            kth = torch.topk(scores, params.top_k).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if params.top_p < 1.0:
            sorted_scores, order = torch.sort(scores, descending=True)
            cumulative = torch.softmax(sorted_scores, dim=-1).cumsum(dim=-1)
            # drop a token once the tokens ranked above it already reach top_p; the
            # first token is always kept
            drop = cumulative - torch.softmax(sorted_scores, dim=-1) >= params.top_p
            scores = scores.scatter(0, order[drop], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self._generator).item())
