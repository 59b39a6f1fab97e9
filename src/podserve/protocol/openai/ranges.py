"""OpenAI's documented ranges for the sampling fields, and the fields podserve's engine
does not apply.

Ranges from OpenAI's API reference (platform.openai.com/docs/api-reference/completions
and /chat): `temperature` 0..2, `top_p` 0..1, `presence_penalty` and `frequency_penalty`
-2.0..2.0, `n` >= 1, `logprobs` 0..5 (completions; podserve allows up to
`MAX_LOGPROBS`), `top_logprobs` 0..20. vLLM's OpenAI server enforces the same penalty
range (vllm/sampling_params.py, `_verify_args`: "presence_penalty must be in [-2, 2]").

The penalties are checked for range first (a value outside it is a client mistake
whatever the engine), then refused when non-zero: the in-house engine does not apply
them, and silently sampling without a penalty the client asked for would be a wrong
answer that looks right. 0, the default, is accepted, since SDKs often send it.
"""

from __future__ import annotations

from podserve.core.errors import InvalidInput

PENALTY_MIN = -2.0
PENALTY_MAX = 2.0
PENALTIES = ("presence_penalty", "frequency_penalty")


def check_penalty(field: str, value: float | None) -> None:
    """Raise InvalidInput for a penalty outside OpenAI's range, or a non-zero one."""
    if value is None or value == 0:
        return
    if not PENALTY_MIN <= value <= PENALTY_MAX:
        raise InvalidInput(
            f"'{field}' must be between {PENALTY_MIN} and {PENALTY_MAX}, got {value!r}"
        )
    raise InvalidInput(
        f"'{field}' is not supported by podserve's engine (it would be ignored); send 0 or omit it"
    )
