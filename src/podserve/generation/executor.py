"""The model executor: runs one scheduler step of a local transformers causal LM.

The scheduler counts tokens; the executor keeps each request's token ids (prompt +
generated) and its KV slot (see `kv_cache.py`). One step:

- the prefill chunks (more than one token) run first, as whole-chunk rows, right-aligned
  and padded at the front, grouped into as few forwards as pay for their padding
  (`_forward_groups`); a request whose prompt ends in the chunk has its first token as
  soon as that forward ends;
- then the decodes (one token each) run in ONE forward of 1-token rows.

Why a new prompt does not share the decodes' forward (as 1-token rows, which an earlier
version did for chunks of up to 16 tokens): measured on the bundled tiny LM, 16 decodes
took 3.7 ms, a lone 3-token prefill 1.7 ms, and the two in one forward 5.5 ms (up to
13 ms as the streams grew): the extra rows of one slot break the decodes' contiguous
slots, so every layer gathers every row's cached K/V instead of viewing it. Apart, the
step costs no more, and the new request's first token leaves after its own 1.7 ms
forward instead of after the whole step (late-request TTFT 2.2-3.1x idle against
3.6-3.8x; `benchmarks/generation_anchors.py`).

A 4-D attention mask and explicit position ids give every query exactly the keys and the
RoPE position of an unbatched forward, so greedy output equals `model.generate`.
It returns the last logits row of each chunk that reaches the end of its sequence.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
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
        # the logits' width: the token ids a request's logit_bias may name
        self.vocab_size = int(config.vocab_size)
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
        self._token_texts: dict[int, str] = {}
        # the query rows' padding: any valid id (its K/V are never written nor seen)
        self._pad_id = int(self.tokenizer.pad_token_id or 0)
        self._bool_mask = self.model.config._attn_implementation == "sdpa"
        # a forward's fixed cost in padded query tokens (see `_forward_groups`)
        self.forward_overhead_tokens = FORWARD_OVERHEAD_TOKENS

    # -- tokenizer -----------------------------------------------------------------------

    @property
    def eos_token_id(self) -> int | None:
        eos = self.tokenizer.eos_token_id
        return None if eos is None else int(eos)

    def token_text(self, token_id: int) -> str:
        """One token decoded on its own: how log-probabilities name tokens (as vLLM's do).
        Called on the event loop; cached, since streams name the same tokens again."""
        text = self._token_texts.get(token_id)
        if text is None:
            text = self._token_texts[token_id] = str(self.tokenizer.decode([token_id]))
        return text

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
        logits: dict[str, torch.Tensor] = {}
        for part in self.forwards(batch):
            logits.update(part)
        return logits

    def forwards(self, batch: SchedulerOutput) -> Iterator[dict[str, torch.Tensor]]:
        """Run one scheduled step forward by forward, yielding each forward's
        `{request_id: logits row}` as soon as it is computed.

        The prefill chunks run first and the decodes last: a request that just arrived
        gets its first token one prefill forward after the step starts instead of after
        the whole step, and the running streams lose nothing, since their tokens come at
        the end of the step either way."""
        import torch

        for request_id in batch.preempted:
            self.release_kv(request_id)
        for chunk in batch.chunks:
            self._claim_slot(chunk)
        decodes = [c for c in batch.chunks if c.num_tokens == 1]
        prefills = [c for c in batch.chunks if c.num_tokens > 1]
        for group in _forward_groups(prefills, self.forward_overhead_tokens):
            with torch.inference_mode():
                part = self._forward(group)
            yield part
        if decodes:
            with torch.inference_mode():
                part = self._forward(decodes)
            yield part

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

    def _forward(self, chunks: list[ScheduledChunk]) -> dict[str, torch.Tensor]:
        """One forward over chunks of any lengths, each one row, right-aligned: padded at
        the front to the longest chunk, so a row's last query is its chunk's last token.
        The layout (see `kv_cache.py`) puts each real token's K/V at its true position in
        its slot and gives each query its true RoPE position and the keys it may see, so
        the logits equal those of an unbatched, unchunked forward."""
        import torch

        # order by slot so that contiguous slots give the cache a view, not a gather
        chunks = sorted(chunks, key=lambda c: self._slot(c.request_id))
        width = max(c.num_tokens for c in chunks)
        rows: list[tuple[int, int, int]] = []
        input_ids: list[list[int]] = []
        for chunk in chunks:
            ids = self._sequences[chunk.request_id].token_ids
            new = ids[chunk.start : chunk.start + chunk.num_tokens]
            rows.append((self._slot(chunk.request_id), chunk.start, chunk.num_tokens))
            input_ids.append([self._pad_id] * (width - chunk.num_tokens) + new)
        layout = self.kv.layout(rows)
        device = self.model.device
        keys = torch.arange(layout.kv_length, device=device)
        visible = (keys.view(1, 1, -1) <= layout.limits.unsqueeze(2)).unsqueeze(1)
        if self._bool_mask:
            mask = visible
        else:  # eager-style attention adds the mask to the scores
            mask = torch.zeros(visible.shape, dtype=self.model.dtype, device=device)
            mask.masked_fill_(~visible, torch.finfo(self.model.dtype).min)
        out = self.model(
            input_ids=torch.tensor(input_ids, device=device),
            attention_mask=mask,
            position_ids=layout.limits,
            cache=self.kv.step_cache(layout),
            use_cache=True,
            logits_to_keep=1,
        )
        for chunk in chunks:
            self.kv.advance(self._slot(chunk.request_id), chunk.num_tokens)
        last = out.logits[:, -1, :]
        return {c.request_id: last[row] for row, c in enumerate(chunks) if c.samples}

    def _slot(self, request_id: str) -> int:
        slot = self._sequences[request_id].slot
        if slot is None:
            raise RuntimeError(f"{request_id!r} holds no KV slot")
        return slot


# A forward's fixed cost in padded query tokens. Measured on the tiny model on CPU, a lone
# prefill forward took 1.44 ms for 3 tokens, 3.83 ms for 35 and 10.2 ms for 128: about
# 1.2 ms plus 0.07 ms a token, so the fixed part is worth ~16 tokens; 32 leans towards
# fewer forwards, each of which also pays Python and a mask build on the step thread.
FORWARD_OVERHEAD_TOKENS = 32


def _forward_groups(chunks: list[ScheduledChunk], overhead: int) -> list[list[ScheduledChunk]]:
    """Split a step's chunks into forwards. A forward costs `overhead` plus its rows times
    its longest chunk (the padded query tokens), so one long prefill chunk does not pad
    every decode to its length. Chunks sorted longest first are cut into runs by an exact
    dynamic program over the distinct lengths; usually this is one forward."""
    if not chunks:
        return []
    chunks = sorted(chunks, key=lambda c: -c.num_tokens)
    # run boundaries: only where the length changes (equal lengths never gain by a cut)
    cuts = [0] + [
        i for i in range(1, len(chunks)) if chunks[i].num_tokens != chunks[i - 1].num_tokens
    ]
    cuts.append(len(chunks))
    best = [0] + [0] * (len(cuts) - 1)  # best[j]: cost of chunks[: cuts[j]]
    back = [0] * len(cuts)
    for j in range(1, len(cuts)):
        best[j], back[j] = min(
            (best[i] + overhead + (cuts[j] - cuts[i]) * chunks[cuts[i]].num_tokens, i)
            for i in range(j)
        )
    groups = []
    j = len(cuts) - 1
    while j > 0:
        i = back[j]
        groups.append(chunks[cuts[i] : cuts[j]])
        j = i
    return groups[::-1]
