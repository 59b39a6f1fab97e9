"""Decoupled responses on ModelStreamInfer: a generative model answers one request with
a response per token batch, as Triton's vLLM backend does.

Every answer on the stream carries Triton's `triton_final_response` parameter, true on
the last response of its request (src/grpc/stream_infer_handler.cc in
github.com/triton-inference-server/server sets it on each response it writes; tritonclient
streaming clients read it to know a request is done). A streamed request's last response
holds the last text and the flag together, as the vLLM backend sends the FINAL flag with
its last output; so an empty final response (`triton_enable_empty_final_response`) is
never needed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from podserve.core.tensors import InferRequest
from podserve.dataplane import CallContext, DataPlaneAPI, GenerateRequest
from podserve.generation.sampling import SamplingParams
from podserve.protocol.v2.vllm_tensors import decode_text_request, text_response
from podserve.server import streams as streams_io
from podserve.server.grpc._generated import inference_pb2 as pb
from podserve.server.grpc.codec import encode_infer_response

FINAL = "triton_final_response"


def mark_final(reply: pb.ModelStreamInferResponse, final: bool) -> pb.ModelStreamInferResponse:
    reply.infer_response.parameters[FINAL].bool_param = final
    return reply


async def generation_replies(
    dataplane: DataPlaneAPI, request: InferRequest, call: CallContext, message_id: str = ""
) -> AsyncIterator[pb.ModelStreamInferResponse]:
    """The responses to one text-generation request; raises (before or between
    responses) only `core.errors` exceptions, which the stream answers in band. Each
    carries the request message's `message_id` verbatim (codec.py `encode_infer_response`)."""
    text_request = decode_text_request(request)
    sampling = SamplingParams.from_fields(
        text_request.parameters, max_tokens=text_request.parameters.max_tokens
    )
    generation = await dataplane.generate(
        GenerateRequest(
            model=request.model_name,
            version=request.model_version,
            prompt=text_request.prompt,
            sequences=(sampling,),
            parameters=request.parameters,  # Triton's `timeout`, as for tensors
        ),
        call,
    )
    (stream,) = generation.streams

    def reply(text: str, final: bool) -> pb.ModelStreamInferResponse:
        response = text_response(request, generation.version, text, {})
        message = pb.ModelStreamInferResponse(
            infer_response=encode_infer_response(
                response, request_id=request.id, message_id=message_id
            )
        )
        return mark_final(message, final)

    async with contextlib.aclosing(stream):
        if not text_request.stream:
            text, _, _ = await streams_io.collect(stream)
            prefix = text_request.prompt if text_request.prepend_prompt else ""
            yield reply(prefix + text, final=True)
            return
        async for event in stream:
            if event.finish_reason is not None:
                streams_io.finish_reason(event)  # raises for an engine abort or error
                yield reply(event.text, final=True)
                return
            if event.text:  # a token may complete no character yet
                yield reply(event.text, final=False)
