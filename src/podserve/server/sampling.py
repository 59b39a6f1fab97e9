"""A request's sampling fields as the engine's `SamplingParams`."""

from __future__ import annotations

from podserve.generation.sampling import SamplingParams
from podserve.protocol.sampling import SamplingFields


def sampling_params(
    fields: SamplingFields, *, max_tokens: int, logprobs: int | None = None
) -> SamplingParams:
    return SamplingParams(
        temperature=fields.temperature,
        top_p=fields.top_p,
        top_k=fields.top_k,
        seed=fields.seed,
        max_tokens=max_tokens,
        stop=fields.stop_strings(),
        ignore_eos=fields.ignore_eos,
        logprobs=logprobs,
    )
