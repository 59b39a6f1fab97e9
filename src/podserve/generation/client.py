"""The text-generation seam: what the data plane asks of any engine that generates text.

Modelled on vLLM's `EngineClient` (vllm/engine/protocol.py: `generate`, `abort`,
`get_tokenizer`, `is_running`, stats), which lets vLLM's OpenAI server drive an
in-process or a multi-process engine through one interface. The in-house engine
(`generation/worker.py` over `generation/engine.py`) implements it; a second engine (vLLM
on a GPU, a remote OpenAI-compatible upstream) is one new module that implements it and
is registered like a runtime (`generation/registry.py`; docs/architecture.md, "Where
things go").

One difference from vLLM, on purpose: `admit` is synchronous and all-or-none. It checks
every limit and reserves the engine's slots for all of a request's sequences (OpenAI's
`n`) before it returns, so every refusal (400 for a request that can never run, 503 for
one that cannot run now) happens before the edge sends a status line. The streams it
returns only drain what was admitted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Protocol

from podserve.generation.engine import EngineStats
from podserve.generation.sampling import SamplingParams
from podserve.generation.stream import TokenEvent


class TokenStream(Protocol):
    """The token events of one admitted sequence. `close()` is idempotent and
    synchronous: it aborts the sequence if it still runs (freeing its slot and KV
    cache) and settles its accounting; exhausting the stream closes it too. A read
    already waiting when `close()` is called is not left hanging: it returns the
    sequence's final event (an "abort", as vLLM's engine ends an aborted request's
    output stream), which is how a deadline wakes its reader (dataplane/streams.py)."""

    def __aiter__(self) -> AsyncIterator[TokenEvent]: ...

    async def __anext__(self) -> TokenEvent: ...

    def close(self) -> None: ...


class EngineClient(Protocol):
    @property
    def max_context(self) -> int:
        """Largest prompt + max_tokens a sequence may take."""
        ...

    def encode_prompt(self, text: str) -> list[int]: ...

    def encode_chat(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """The model's chat template applied to OpenAI-style messages, as token ids."""
        ...

    def token_text(self, token_id: int) -> str:
        """One token's text, for log-probability entries."""
        ...

    def admit(
        self, prompt_ids: Sequence[int], sequences: Sequence[SamplingParams]
    ) -> list[TokenStream]:
        """Admit one request of `len(sequences)` sequences sharing a prompt, all or none:
        raise `InvalidInput` (never fits), `Unavailable` (not now, with a retry hint) or
        return one started stream per sequence. A sequence with `fit_context` arrives
        with a max_tokens that fits `max_context` (served.py); an engine with a cap of
        its own lowers it to that cap (`SamplingParams.fitted`) rather than refusing."""
        ...

    def stats(self) -> EngineStats: ...

    def close(self) -> None:
        """Stop the engine (its threads, its upstream connections) when unloaded."""
        ...
