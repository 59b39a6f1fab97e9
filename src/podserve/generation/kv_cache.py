"""The slot KV cache: preallocated K/V per layer, one slot per running sequence.

Layout per layer: `[max_num_seqs, kv_heads, max_context, head_dim]` for K and for V.
A sequence owns one slot; its token at position p has its K/V at index p of the slot.
A step hands transformers a `Cache` whose layers write the step's new K/V straight into
the slots and return the slots' K/V up to the longest sequence of the step. Shorter
sequences are right-padded there; the attention mask hides the padding and explicit
`position_ids` give each token its true RoPE position. Because a sequence's new token sits
at its own length L <= the step's longest past M, and transformers places every query at
index M, the causal mask still lets each query see its own new key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


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

    def step_cache(self, slots: list[int], num_tokens: int) -> Any:
        """A transformers `Cache` for one forward over `slots`, each feeding `num_tokens`
        tokens at its current length. More than one token per row needs one row."""
        from transformers.cache_utils import Cache

        if num_tokens > 1 and len(slots) != 1:
            raise ValueError("multi-token chunks run one sequence per forward")
        lengths = [self.lengths[s] for s in slots]
        layers = [
            _slot_layer_class()(self.keys[i], self.values[i], slots, lengths, num_tokens)
            for i in range(len(self.keys))
        ]
        return Cache(layers=layers)

    def advance(self, slots: list[int], num_tokens: int) -> None:
        for slot in slots:
            self.lengths[slot] += num_tokens


_SLOT_LAYER: type | None = None


def _slot_layer_class() -> type:
    """Defined on first use so importing this module needs no transformers."""
    global _SLOT_LAYER
    if _SLOT_LAYER is None:
        _SLOT_LAYER = _define_slot_layer()
    return _SLOT_LAYER


def _define_slot_layer() -> type:
    import torch
    from transformers.cache_utils import DynamicLayer

    class SlotLayer(DynamicLayer):  # type: ignore[no-untyped-call]  # transformers: untyped
        """One layer's view of the slot cache for one forward."""

        def __init__(
            self,
            keys: torch.Tensor,
            values: torch.Tensor,
            slots: list[int],
            lengths: list[int],
            num_tokens: int,
        ) -> None:
            super().__init__()  # type: ignore[no-untyped-call]  # transformers: untyped
            self._all_keys = keys
            self._all_values = values
            self._slots = slots
            self._lengths = lengths
            self._num_tokens = num_tokens
            self._past = max(lengths)
            first = slots[0]
            # running slots are usually contiguous (see SlotKVCache.allocate): a slice is
            # a view, a gather is a copy of every row's past
            self._contiguous = slots == list(range(first, first + len(slots)))
            self._slot_index = torch.tensor(slots, device=keys.device)
            self._pos_index = torch.tensor(lengths, device=keys.device)
            self.is_initialized = True

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            n = self._num_tokens
            if n == 1:
                # [B, H, 1, D] -> one new position per row, each at its own length
                self._all_keys[self._slot_index, :, self._pos_index] = key_states[:, :, 0]
                self._all_values[self._slot_index, :, self._pos_index] = value_states[:, :, 0]
            else:
                slot, start = self._slots[0], self._lengths[0]
                self._all_keys[slot, :, start : start + n] = key_states[0]
                self._all_values[slot, :, start : start + n] = value_states[0]
            end = self._past + n
            if self._contiguous:
                first = self._slots[0]
                rows = slice(first, first + len(self._slots))
                return self._all_keys[rows, :, :end], self._all_values[rows, :, :end]
            return (
                self._all_keys[:, :, :end].index_select(0, self._slot_index),
                self._all_values[:, :, :end].index_select(0, self._slot_index),
            )

        def get_seq_length(self) -> int:
            return self._past

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self._past + query_length, 0

    return SlotLayer
