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

JSON null for any optional field is its default (OpenAI's "nullable"), on every endpoint.

Stop strings: at most 4 (OpenAI's API reference: "Up to 4 sequences"; Hugging Face TGI's
`--max-stop-sequences` defaults to 4 too), each at most 1,024 characters, on every
endpoint, checked before any item is validated (protocol/json_body.py). The engine looks
for every stop in the text after every token (generation/detokenizer.py), and
`/v2/models/{m}/generate` took 100,000 of them before this bound. A partial match of a
1,024-character stop costs 0.12 ms a token at worst (measured on the detokenizer's suffix
search; 4 of them 0.47 ms), and stop strings in use are a few characters long.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)

from podserve.protocol.json_body import FailFastList, over_limit

# torch.Generator.manual_seed's domain: the engine seeds a request's generator with it.
SEED_MIN = -(2**63)
SEED_MAX = 2**64 - 1
PENALTY_MIN = -2.0
PENALTY_MAX = 2.0
MAX_STOP_SEQUENCES = 4
# OpenAI's `logit_bias`: "values between -100 and 100", at most 300 tokens (the limit
# OpenAI's API enforces; vLLM has none of its own).
LOGIT_BIAS_MAX = 100.0
MAX_LOGIT_BIASES = 300
MAX_STOP_CHARS = 1024


def _bounded_stop(value: object, validate: ValidatorFunctionWrapHandler) -> object:
    """The count and lengths of the stop strings, before any is validated."""
    stops = value if isinstance(value, list) else [value]
    if len(stops) > MAX_STOP_SEQUENCES:
        raise over_limit("stop sequences", len(stops), MAX_STOP_SEQUENCES)
    longest = max((len(s) for s in stops if isinstance(s, str)), default=0)
    if longest > MAX_STOP_CHARS:
        raise over_limit("characters in a stop sequence", longest, MAX_STOP_CHARS)
    return validate(value)


class SamplingFields(BaseModel):
    # strict: a JSON string is not a boolean or a number ("stream": "yes" and
    # "temperature": "0.5" are client mistakes to name, not to coerce); integers are
    # still accepted for float fields, as JSON does not tell 1 from 1.0.
    model_config = ConfigDict(extra="ignore", strict=True)

    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)  # an extension vLLM also accepts
    seed: int | None = Field(None, ge=SEED_MIN, le=SEED_MAX)
    # O(1) to refuse, whatever the list holds (the module's doc)
    stop: Annotated[str | FailFastList[str] | None, WrapValidator(_bounded_stop)] = None
    ignore_eos: bool = False  # vLLM's extension, used by benchmarks
    # None (JSON null) is OpenAI's "not given": 0. Finite: NaN and infinities are refused.
    presence_penalty: float | None = Field(
        None, ge=PENALTY_MIN, le=PENALTY_MAX, allow_inf_nan=False
    )
    frequency_penalty: float | None = Field(
        None, ge=PENALTY_MIN, le=PENALTY_MAX, allow_inf_nan=False
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_default(cls, data: Any) -> Any:
        """JSON null for an optional field is its default, as OpenAI takes it: its API
        reference types temperature, top_p, n, stream, ... as nullable, and the openai
        SDKs send null for a parameter set to None. A required field's null is still
        refused, by its name."""
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {
            key: value
            for key, value in data.items()
            if value is not None or key not in fields or fields[key].is_required()
        }

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
