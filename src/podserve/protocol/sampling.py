"""The sampling fields every text-generation request schema shares (OpenAI's and
Triton's generate extension), validated the same way everywhere.

Penalties: OpenAI's API reference (platform.openai.com/docs/api-reference/completions and
/chat) gives `presence_penalty` and `frequency_penalty` as "Number between -2.0 and 2.0",
nullable, default 0; vLLM's OpenAI server enforces the same range
(vllm/sampling_params.py, `_verify_args`). The engine applies them
(generation/penalties.py). They are shared fields, so Triton's generate extension takes
them too, instead of ignoring them as unknown knobs: vLLM's Triton backend builds vLLM's
`SamplingParams` from the request's `sampling_parameters` JSON, penalties included
(triton-inference-server/vllm_backend, src/utils/vllm_backend_utils.py,
`TritonSamplingParams.from_dict`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from podserve.protocol.json_body import FailFastList

# torch.Generator.manual_seed's domain: the engine seeds a request's generator with it.
SEED_MIN = -(2**63)
SEED_MAX = 2**64 - 1
PENALTY_MIN = -2.0
PENALTY_MAX = 2.0


class SamplingFields(BaseModel):
    # strict: a JSON string is not a boolean or a number ("stream": "yes" and
    # "temperature": "0.5" are client mistakes to name, not to coerce); integers are
    # still accepted for float fields, as JSON does not tell 1 from 1.0.
    model_config = ConfigDict(extra="ignore", strict=True)

    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)  # an extension vLLM also accepts
    seed: int | None = Field(None, ge=SEED_MIN, le=SEED_MAX)
    stop: str | FailFastList[str] | None = None  # O(1) to refuse (protocol/json_body.py)
    ignore_eos: bool = False  # vLLM's extension, used by benchmarks
    # None (JSON null) is OpenAI's "not given": 0. Finite: NaN and infinities are refused.
    presence_penalty: float | None = Field(
        None, ge=PENALTY_MIN, le=PENALTY_MAX, allow_inf_nan=False
    )
    frequency_penalty: float | None = Field(
        None, ge=PENALTY_MIN, le=PENALTY_MAX, allow_inf_nan=False
    )

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
