"""The slot KV cache: preallocated K/V per layer, one slot per running sequence.

Layout per layer: `[max_num_seqs, kv_heads, max_context, head_dim]` for K and for V.
A sequence owns one slot; its token at position p has its K/V at index p of the slot.
A forward covers rows `(slot, start, num_tokens)`, each feeding its own number of new
tokens at its own position (a ragged step: decodes and prefill chunks together; a chunk
may also be split over several rows of the same slot). The query rows are padded to
the step's longest chunk with each row's real tokens at the END (so the last query of
every row is its last token); padding queries write nothing. The `Cache` handed to
transformers writes each real token's new K/V straight into its slot and returns the
slots' K/V up to `StepLayout.kv_length`, the longest `length + new tokens` of the step.
The executor passes a 4-D attention mask built from the same layout (`StepLayout.limits`):
query q of a row sees the keys `[0, limit]`, its own past and its own new tokens up to
itself, so padding and other rows' longer pasts stay hidden.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, slots=True)
class StepLayout:
    """Where one forward's query rows go, as index tensors shared by every layer."""

    slots: list[int]
    kv_length: int  # keys returned per row: max(length + new tokens)
    slot_index: torch.Tensor  # [rows]
    # one entry per real new token: (its slot, its position there) <- (its row, its query)
    write_slot: torch.Tensor
    write_pos: torch.Tensor
    write_row: torch.Tensor
    write_query: torch.Tensor
    # [rows, queries]: the last key index each query may see; also its RoPE position
    limits: torch.Tensor


class SlotKVCache:
    """Owns the K/V tensors and which slots are free; knows nothing of requests."""

    def __init__(
        self,
        *,
        num_layers: int,
        max_num_seqs: int,
        kv_heads: int,
        head_dim: int,
        max_context: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        import torch

        shape = (max_num_seqs, kv_heads, max_context, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.max_num_seqs = max_num_seqs
        self.max_context = max_context
        self.device = device
        self.lengths = [0] * max_num_seqs  # tokens whose K/V are in each slot
        self._free = list(range(max_num_seqs))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise RuntimeError("no free KV slot: the scheduler admitted more than max_num_seqs")
        # lowest free slot first, so running sequences tend to sit in contiguous slots
        # and the step can slice the cache instead of gathering it
        self._free.sort()
        slot = self._free.pop(0)
        self.lengths[slot] = 0
        return slot

    def release(self, slot: int) -> None:
        # stale K/V stay behind: a new owner overwrites them before they are unmasked
        self.lengths[slot] = 0
        self._free.append(slot)

    def layout(self, rows: list[tuple[int, int, int]]) -> StepLayout:
        """The layout of one forward whose query rows are `(slot, start, num_tokens)`: each
        feeds the slot's tokens `[start, start + num_tokens)`, the earlier ones already
        cached or fed by an earlier row of the same forward (a chunk may be split over
        rows, since every layer writes all rows' K/V before it attends). Rows are
        `max(num_tokens)` queries long."""
        import torch

        if not rows or min(n for _, _, n in rows) < 1:
            raise ValueError("a forward needs rows of at least one token")
        width = max(n for _, _, n in rows)
        kv_length = max(start + n for _, start, n in rows)
        if kv_length > self.max_context:
            raise ValueError(f"the step reaches position {kv_length} > {self.max_context}")
        w_slot: list[int] = []
        w_pos: list[int] = []
        w_row: list[int] = []
        w_query: list[int] = []
        for row, (slot, start, n) in enumerate(rows):
            w_slot += [slot] * n
            w_pos += range(start, start + n)
            w_row += [row] * n
            w_query += range(width - n, width)
        device = self.device
        starts = torch.tensor([start for _, start, _ in rows], device=device).unsqueeze(1)
        pads = torch.tensor([width - n for _, _, n in rows], device=device).unsqueeze(1)
        queries = torch.arange(width, device=device).unsqueeze(0)
        # a padding query (before the row's tokens) sees the same keys as its first token
        limits = starts + (queries - pads).clamp(min=0)
        slots = [slot for slot, _, _ in rows]
        return StepLayout(
            slots=slots,
            kv_length=kv_length,
            slot_index=torch.tensor(slots, device=device),
            write_slot=torch.tensor(w_slot, device=device),
            write_pos=torch.tensor(w_pos, device=device),
            write_row=torch.tensor(w_row, device=device),
            write_query=torch.tensor(w_query, device=device),
            limits=limits,
        )

    def step_cache(self, layout: StepLayout) -> Any:
        """A transformers `Cache` for one forward laid out by `layout`."""
        from transformers.cache_utils import Cache

        cls = _slot_layer_class()
        layers = [cls(self.keys[i], self.values[i], layout) for i in range(len(self.keys))]
        return Cache(layers=layers)

    def advance(self, slot: int, num_tokens: int) -> None:
        self.lengths[slot] += num_tokens


_SLOT_LAYER: type | None = None


def _slot_layer_class() -> type:
    """Defined on first use so importing this module needs no transformers."""
    global _SLOT_LAYER
    if _SLOT_LAYER is None:
        _SLOT_LAYER = _define_slot_layer()
    return _SLOT_LAYER


def _define_slot_layer() -> type:
    from transformers.cache_utils import DynamicLayer

    class SlotLayer(DynamicLayer):  # type: ignore[no-untyped-call]  # transformers: untyped
        """One layer's view of the slot cache for one forward."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, layout: StepLayout) -> None:
            super().__init__()  # type: ignore[no-untyped-call]  # transformers: untyped
            self._all_keys = keys
            self._all_values = values
            self._layout = layout
            slots = layout.slots
            first = slots[0]
            # running slots are usually contiguous (see SlotKVCache.allocate): a slice is
            # a view, a gather is a copy of every row's past
            self._contiguous = slots == list(range(first, first + len(slots)))
            self.is_initialized = True

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            lay = self._layout
            # [rows, heads, queries, dim] -> each real token's K/V at its slot and position
            new_keys = key_states[lay.write_row, :, lay.write_query]
            new_values = value_states[lay.write_row, :, lay.write_query]
            self._all_keys[lay.write_slot, :, lay.write_pos] = new_keys
            self._all_values[lay.write_slot, :, lay.write_pos] = new_values
            end = lay.kv_length
            if self._contiguous:
                first = lay.slots[0]
                rows = slice(first, first + len(lay.slots))
                return self._all_keys[rows, :, :end], self._all_values[rows, :, :end]
            return (
                self._all_keys[:, :, :end].index_select(0, lay.slot_index),
                self._all_values[:, :, :end].index_select(0, lay.slot_index),
            )

        def get_seq_length(self) -> int:
            return self._layout.kv_length - int(self._layout.limits.shape[1])

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self._layout.kv_length, 0

    return SlotLayer
