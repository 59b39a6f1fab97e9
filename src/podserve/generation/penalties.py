"""Presence and frequency penalties (OpenAI's), applied to a step's logits.

OpenAI's definition (API reference, `presence_penalty` / `frequency_penalty`: "Number
between -2.0 and 2.0"; the "frequency and presence penalties" parameter details):

    logits[t] -= frequency_penalty * count[t] + presence_penalty * (count[t] > 0)

where `count[t]` is how often token t was sampled before this position. Like vLLM, podserve
counts only the tokens generated for this sequence, never the prompt's: vLLM's
`apply_penalties` (vllm/model_executor/layers/utils.py) subtracts both penalties over
`output_bin_counts` / `output_mask` (the prompt only reaches its repetition penalty), and its
v1 GPU sampler (vllm/v1/worker/gpu/sample/penalties.py, `_penalties_kernel`) does the same.
The penalties apply to the raw logits, before temperature, top-k and top-p (vLLM v1's
sampler order: vllm/v1/sample/sampler.py, step 6 before step 7), so they change greedy
output too. Log-probabilities stay those of the raw logits (vLLM's default
`logprobs_mode`, "raw_logprobs").

Kept incrementally, as vLLM v1 keeps `PenaltiesState.output_bin_counts` across steps: one
row per penalised sequence in two `[rows, vocab]` tensors, the counts and the penalty
they give. After a step, its sampled tokens are counted and their penalties recomputed
(`frequency * count + presence`) with a few ops over one element per row; the next step
then subtracts the whole penalty of its penalised rows with one gather and one indexed
subtraction. Nothing is recounted, the step's work over the vocabulary is the least it
can be, and sequences whose penalties are 0 get no row and cost nothing.

A preempted sequence keeps its row: it keeps its generated tokens (recompute keeps the
ids), so its counts stay right. The engine releases a row when the sequence ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

# Rows allocated at first; the tensors double when every row is taken.
_FIRST_ROWS = 4


class Penalised(Protocol):
    """What the counts need of a sequence's sampler: its penalties and its row."""

    @property
    def presence_penalty(self) -> float: ...

    @property
    def frequency_penalty(self) -> float: ...

    count_row: int | None


class TokenCounts:
    """The generated-token counts, and the penalties they give, of one engine's penalised
    sequences.

    The engine calls it under its lock (the step thread samples; an abort on another
    thread releases). A row is taken at a sequence's first penalised step and given back
    by `release`."""

    __slots__ = ("_counts", "_free", "_frequency", "_penalty", "_presence")

    def __init__(self) -> None:
        self._counts: torch.Tensor | None = None  # [rows, vocab]: times each token was sampled
        self._penalty: torch.Tensor | None = None  # [rows, vocab]: what to subtract
        self._presence: torch.Tensor | None = None  # [rows]
        self._frequency: torch.Tensor | None = None  # [rows]
        self._free: list[int] = []

    @property
    def rows_in_use(self) -> int:
        if self._counts is None:
            return 0
        return int(self._counts.shape[0]) - len(self._free)

    def penalize(
        self, logits: torch.Tensor, positions: Sequence[int], owners: Sequence[Penalised]
    ) -> None:
        """Subtract each owner's penalties from `logits[positions[i]]` (in place).
        `logits` is the step's `[batch, vocab]` float tensor."""
        import torch

        if not positions:
            return
        device = logits.device
        rows = torch.tensor([self._row(o, logits) for o in owners], device=device)
        penalty = self._tensors()[1][rows].to(logits.dtype)
        if len(positions) == logits.shape[0]:  # every row of the step is penalised
            logits.sub_(penalty)
        else:
            logits.index_add_(0, torch.tensor(positions, device=device), penalty, alpha=-1)

    def record(self, owners: Sequence[Penalised], tokens: Sequence[int]) -> None:
        """Count each owner's sampled token and recompute that token's penalty from its
        count, exactly as the formula says (not by summing increments, which would drift)."""
        import torch

        if not owners:
            return
        counts, penalty, presence, frequency = self._tensors()
        device = counts.device
        rows = torch.tensor([self._held_row(o) for o in owners], device=device)
        ids = torch.tensor(list(tokens), device=device)
        index = (rows, ids)
        # one row per sequence, so no (row, token) pair repeats: plain indexed writes
        count = counts[index] + 1
        counts[index] = count
        penalty[index] = frequency[rows] * count + presence[rows]

    def release(self, owner: Penalised) -> None:
        """The sequence ended: its row is free (zeroed when it is taken again)."""
        if owner.count_row is not None:
            self._free.append(owner.count_row)
            owner.count_row = None

    def _row(self, owner: Penalised, logits: torch.Tensor) -> int:
        import torch

        if owner.count_row is not None:
            return owner.count_row
        if self._counts is None:
            vocab = int(logits.shape[-1])
            self._counts = torch.zeros(_FIRST_ROWS, vocab, device=logits.device)
            self._penalty = torch.zeros(_FIRST_ROWS, vocab, device=logits.device)
            self._presence = torch.zeros(_FIRST_ROWS, device=logits.device)
            self._frequency = torch.zeros(_FIRST_ROWS, device=logits.device)
            self._free = list(range(_FIRST_ROWS - 1, -1, -1))
        elif not self._free:
            counts, penalty, presence, frequency = self._tensors()
            rows = int(counts.shape[0])
            self._counts = torch.cat([counts, torch.zeros_like(counts)])
            self._penalty = torch.cat([penalty, torch.zeros_like(penalty)])
            self._presence = torch.cat([presence, torch.zeros_like(presence)])
            self._frequency = torch.cat([frequency, torch.zeros_like(frequency)])
            self._free = list(range(2 * rows - 1, rows - 1, -1))
        counts, penalty, presence, frequency = self._tensors()
        row = self._free.pop()
        counts[row].zero_()
        penalty[row].zero_()
        presence[row] = owner.presence_penalty
        frequency[row] = owner.frequency_penalty
        owner.count_row = row
        return row

    def _held_row(self, owner: Penalised) -> int:
        if owner.count_row is None:
            raise RuntimeError("a token was recorded for a sequence that was never penalised")
        return owner.count_row

    def _tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        if (
            self._counts is None
            or self._penalty is None
            or self._presence is None
            or self._frequency is None
        ):
            raise RuntimeError("no sequence has been penalised yet")
        return self._counts, self._penalty, self._presence, self._frequency
