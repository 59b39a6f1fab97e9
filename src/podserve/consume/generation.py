"""OpenAI completions and chat bodies from a stream entry: `DataPlane.generate`, every
choice read to its end, one non-streamed response body.

The same steps as the HTTP edge's non-streamed answer (server/routes_openai.py), over the
same protocol schemas and engine; consume sits beside server and may not import it, so the
few lines that join them are here. A queue has no connection to stream tokens on, so
`stream: true` is refused (400), as are `logprobs` (not carried in results yet).
"""

from __future__ import annotations

import asyncio

from podserve.core.errors import InferenceFailed, InvalidInput
from podserve.dataplane import CallContext, DataPlaneAPI, GenerateRequest, GenerationStream
from podserve.generation.sampling import UNTIL_CONTEXT_FULL, SamplingParams, choice_params
from podserve.protocol.openai import completions as oai


async def completion(
    dataplane: DataPlaneAPI, model: str, body: bytes, call: CallContext, *, chat: bool
) -> bytes:
    parsed: oai.CompletionRequest | oai.ChatRequest
    if chat:
        parsed = oai.decode_request(body, oai.ChatRequest)
        max_tokens = parsed.token_limit
    else:
        parsed = oai.decode_request(body, oai.CompletionRequest)
        max_tokens = parsed.max_tokens
    if parsed.stream:
        raise InvalidInput("'stream': true is not supported on a queue; results are whole")
    if parsed.logprob_count() is not None:
        raise InvalidInput("'logprobs' is not supported by podserve consume")
    dataplane.check_model(model)
    # The HTTP routes' defaults (routes_openai._params): chat runs until EOS, the model's
    # cap or a full context; a completion takes 16 tokens, or what the context leaves.
    default = UNTIL_CONTEXT_FULL if chat else 16
    params = SamplingParams.from_fields(
        parsed,
        max_tokens=max_tokens or default,
        logit_bias=parsed.logit_biases(),
        fit_context=max_tokens is None,
    )
    sequences = choice_params(params, parsed.n)
    if isinstance(parsed, oai.ChatRequest):
        request = GenerateRequest(model=model, messages=parsed.chat(), sequences=sequences)
    else:
        request = GenerateRequest(model=model, prompt=parsed.prompt_text(), sequences=sequences)
    generation = await dataplane.generate(request, call)
    tasks = [asyncio.ensure_future(_collect(s)) for s in generation.streams]
    try:
        results = await asyncio.gather(*tasks)
    finally:  # one choice failed, or the consumer was cancelled: end them all
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for stream in generation.streams:
            await stream.aclose()
    echo = parsed.echo_text()
    answers = [oai.Choice(echo + text, finish) for text, finish, _ in results]
    use = oai.usage(generation.prompt_tokens, sum(n for _, _, n in results))
    rid = oai.new_id("chatcmpl" if chat else "cmpl")
    return (oai.chat_body if chat else oai.completion_body)(rid, parsed.model, answers, use)


async def _collect(stream: GenerationStream) -> tuple[str, str, int]:
    """A whole sequence: its text, its finish reason and how many tokens it generated."""
    parts: list[str] = []
    tokens = 0
    finish = "stop"
    async for event in stream:
        parts.append(event.text)
        tokens += event.token_id is not None
        if event.finish_reason is not None:
            if event.finish_reason not in ("stop", "length"):
                raise InferenceFailed(f"generation ended with {event.finish_reason!r}")
            finish = event.finish_reason
    return "".join(parts), finish, tokens
