"""The model executor: runs one scheduler step of a local transformers causal LM.

The scheduler counts tokens; the executor keeps each request's token ids (prompt +
generated) and its KV slot (see `kv_cache.py`). One step:

- every 1-token chunk (the decodes, the hot path) runs in ONE forward over all of them;
- every longer chunk (a prefill piece) runs as its own forward of one row, reading the
  request's earlier chunks from its slot, so chunked prefill needs no padding.

It returns the last logits row of each chunk that reaches the end of its sequence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from podserve.generation.kv_cache import SlotKVCache
from podserve.scheduling import ScheduledChunk, SchedulerOutput

if TYPE_CHECKING:
    import torch


@dataclass(slots=True)
class _Sequence:
    token_ids: list[int]
    slot: int | None = None


class ModelExecutor:
    def __init__(
        self,
        model_dir: str | Path,
        *,
        max_num_seqs: int,
        max_context: int | None = None,
        torch_threads: int | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if torch_threads is not None:
            torch.set_num_threads(torch_threads)
        self.model: Any = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
        self.model.eval()  # type: ignore[no-untyped-call]  # torch's Module.eval is untyped
        self.tokenizer: Any = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        config = self.model.config.get_text_config(decoder=True)
        model_context = int(config.max_position_embeddings)
        self.max_context = min(max_context or model_context, model_context)
        heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        self.max_num_seqs = max_num_seqs
        self.kv = SlotKVCache(
            num_layers=int(config.num_hidden_layers),
            max_num_seqs=max_num_seqs,
            kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
            head_dim=head_dim,
            max_context=self.max_context,
            dtype=self.model.dtype,
            device=self.model.device,
        )
        self._sequences: dict[str, _Sequence] = {}

    # -- tokenizer -----------------------------------------------------------------------

    @property
    def eos_token_id(self) -> int | None:
        eos = self.tokenizer.eos_token_id
        return None if eos is None else int(eos)

    def encode_prompt(self, text: str) -> list[int]:
        return [int(t) for t in self.tokenizer.encode(text, add_special_tokens=True)]

    def encode_chat(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, Mapping):  # some tokenizers return a BatchEncoding
            ids = ids["input_ids"]
        return [int(t) for t in ids]

    # -- sequences -----------------------------------------------------------------------

    def add_sequence(self, request_id: str, prompt_ids: Sequence[int]) -> None:
        if request_id in self._sequences:
            raise ValueError(f"sequence {request_id!r} already exists")
        self._sequences[request_id] = _Sequence(list(prompt_ids))

    def append_token(self, request_id: str, token_id: int) -> None:
        self._sequences[request_id].token_ids.append(token_id)

    def token_ids(self, request_id: str) -> list[int]:
        return self._sequences[request_id].token_ids

    def release_kv(self, request_id: str) -> None:
        """Preempted: drop the KV, keep the ids (the request re-prefills them)."""
        seq = self._sequences.get(request_id)
        if seq is not None and seq.slot is not None:
            self.kv.release(seq.slot)
            seq.slot = None

    def free(self, request_id: str) -> None:
        """Finished or aborted: drop the KV and the ids. Unknown ids are ignored."""
        self.release_kv(request_id)
        self._sequences.pop(request_id, None)

    @property
    def num_sequences(self) -> int:
        return len(self._sequences)

    # -- the step ------------------------------------------------------------------------

    def execute(self, batch: SchedulerOutput) -> dict[str, torch.Tensor]:
        """Run one scheduled step; return `{request_id: logits row}` for sampling chunks."""
        import torch

        for request_id in batch.preempted:
            self.release_kv(request_id)
        decodes: list[ScheduledChunk] = []
        prefills: list[ScheduledChunk] = []
        for chunk in batch.chunks:
            self._claim_slot(chunk)
            (decodes if chunk.num_tokens == 1 else prefills).append(chunk)
        logits: dict[str, torch.Tensor] = {}
        with torch.inference_mode():
            if decodes:
                logits.update(self._forward_decodes(decodes))
            for chunk in prefills:
                logits.update(self._forward_prefill(chunk))
        return logits

    def _claim_slot(self, chunk: ScheduledChunk) -> None:
        seq = self._sequences[chunk.request_id]
        if seq.slot is None:
            if chunk.start != 0:
                raise RuntimeError(f"{chunk.request_id!r} has no KV but starts at {chunk.start}")
            seq.slot = self.kv.allocate()
        if self.kv.lengths[seq.slot] != chunk.start:
            raise RuntimeError(
                f"{chunk.request_id!r}: chunk starts at {chunk.start} but "
                f"{self.kv.lengths[seq.slot]} tokens are cached"
            )
        if chunk.start + chunk.num_tokens > min(len(seq.token_ids), self.max_context):
            raise RuntimeError(f"{chunk.request_id!r}: chunk runs past its tokens or context")

    def _forward_decodes(self, chunks: list[ScheduledChunk]) -> dict[str, torch.Tensor]:
        import torch

        # order by slot so that contiguous slots give the cache a view, not a gather
        chunks = sorted(chunks, key=lambda c: self._slot(c.request_id))
        slots = [self._slot(c.request_id) for c in chunks]
        lengths = [c.start for c in chunks]
        device = self.model.device
        ids = [self._sequences[c.request_id].token_ids[c.start] for c in chunks]
        input_ids = torch.tensor(ids, device=device).unsqueeze(1)
        position_ids = torch.tensor(lengths, device=device).unsqueeze(1)
        past = max(lengths)
        # each row sees its own past [0, L] (its new key sits at L); (L, past] is padding
        mask = torch.arange(past + 1, device=device).unsqueeze(0) <= position_ids
        out = self.model(
            input_ids=input_ids,
            attention_mask=mask.long(),
            position_ids=position_ids,
            cache=self.kv.step_cache(slots, 1),
            use_cache=True,
            logits_to_keep=1,
        )
        self.kv.advance(slots, 1)
        rows = out.logits[:, -1, :]
        return {c.request_id: rows[i] for i, c in enumerate(chunks) if c.samples}

    def _forward_prefill(self, chunk: ScheduledChunk) -> dict[str, torch.Tensor]:
        import torch

        slot = self._slot(chunk.request_id)
        device = self.model.device
        end = chunk.start + chunk.num_tokens
        ids = self._sequences[chunk.request_id].token_ids[chunk.start : end]
        out = self.model(
            input_ids=torch.tensor([ids], device=device),
            attention_mask=torch.ones((1, end), dtype=torch.long, device=device),
            position_ids=torch.arange(chunk.start, end, device=device).unsqueeze(0),
            cache=self.kv.step_cache([slot], chunk.num_tokens),
            use_cache=True,
            logits_to_keep=1,
        )
        self.kv.advance([slot], chunk.num_tokens)
        return {chunk.request_id: out.logits[0, -1, :]} if chunk.samples else {}

    def _slot(self, request_id: str) -> int:
        slot = self._sequences[request_id].slot
        if slot is None:
            raise RuntimeError(f"{request_id!r} holds no KV slot")
        return slot
