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

The counts are kept incrementally, as vLLM v1's `PenaltiesState.output_bin_counts`: one
`[rows, vocab]` tensor, one row per penalised sequence, and after each step one
`index_put_` adds 1 at every penalised row's sampled token. A step never recounts a
sequence's tokens, and the penalty for the step's penalised rows is one gather and one
fused subtraction. Sequences whose penalties are 0 get no row and cost nothing.

A preempted sequence keeps its row: it keeps its generated tokens (recompute keeps the
ids), so its counts stay right. The engine releases a row when the sequence ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

# Rows allocated at first; the tensor doubles when every row is taken.
_FIRST_ROWS = 4


def apply_penalties(
    logits: torch.Tensor,
    counts: torch.Tensor,
    presence: torch.Tensor,
    frequency: torch.Tensor,
) -> None:
    """In place: `logits[i, t] -= frequency[i] * counts[i, t] + presence[i] * (counts[i, t] > 0)`.

    `logits` and `counts` are `[rows, vocab]`; `presence` and `frequency` are `[rows]`."""
    seen = (counts > 0).to(logits.dtype)
    logits.sub_(frequency.unsqueeze(1) * counts + presence.unsqueeze(1) * seen)


class Penalised(Protocol):
    """What the counts need of a sequence's sampler: its penalties and its row."""

    @property
    def presence_penalty(self) -> float: ...

    @property
    def frequency_penalty(self) -> float: ...

    count_row: int | None


class TokenCounts:
    """The generated-token counts of one engine's penalised sequences.

    The engine calls it under its lock (the step thread samples; an abort on another
    thread releases). A row is taken at a sequence's first penalised step and given back
    by `release`."""

    __slots__ = ("_counts", "_free")

    def __init__(self) -> None:
        self._counts: torch.Tensor | None = None  # [rows, vocab] float32 counts
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
        every_row = len(positions) == logits.shape[0]
        where = None if every_row else torch.tensor(positions, device=device)
        # every row penalised: in place; otherwise a gather of those rows and a put back
        picked = logits if where is None else logits[where]
        apply_penalties(
            picked,
            self._tensor()[rows],
            torch.tensor([o.presence_penalty for o in owners], dtype=logits.dtype, device=device),
            torch.tensor([o.frequency_penalty for o in owners], dtype=logits.dtype, device=device),
        )
        if where is not None:
            logits[where] = picked

    def record(self, owners: Sequence[Penalised], tokens: Sequence[int]) -> None:
        """Count each owner's sampled token: one `index_put_` for the whole step."""
        import torch

        if not owners:
            return
        counts = self._tensor()
        device = counts.device
        rows = torch.tensor([self._held_row(o) for o in owners], device=device)
        ids = torch.tensor(list(tokens), device=device)
        ones = torch.ones(len(owners), dtype=counts.dtype, device=device)
        counts.index_put_((rows, ids), ones, accumulate=True)

    def release(self, owner: Penalised) -> None:
        """The sequence ended: its row is free (zeroed when it is taken again)."""
        if owner.count_row is not None:
            self._free.append(owner.count_row)
            owner.count_row = None

    def _row(self, owner: Penalised, logits: torch.Tensor) -> int:
        import torch

        if owner.count_row is not None:
            return owner.count_row
        counts = self._counts
        if counts is None:
            counts = torch.zeros(_FIRST_ROWS, logits.shape[-1], device=logits.device)
            self._free = list(range(_FIRST_ROWS - 1, -1, -1))
        elif not self._free:
            rows = int(counts.shape[0])
            counts = torch.cat([counts, torch.zeros_like(counts)])
            self._free = list(range(2 * rows - 1, rows - 1, -1))
        self._counts = counts
        row = self._free.pop()
        counts[row].zero_()
        owner.count_row = row
        return row

    def _held_row(self, owner: Penalised) -> int:
        if owner.count_row is None:
            raise RuntimeError("a token was recorded for a sequence that was never penalised")
        return owner.count_row

    def _tensor(self) -> torch.Tensor:
        if self._counts is None:
            raise RuntimeError("no sequence has been penalised yet")
        return self._counts
