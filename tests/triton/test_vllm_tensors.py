"""Decoding the vLLM backend's tensor interface into a text-generation request."""

from __future__ import annotations

import re

import numpy as np
import pytest

from podserve.core.errors import InvalidInput
from podserve.core.tensors import Datatype, InferRequest, Tensor
from podserve.protocol.v2.vllm_tensors import (
    asks_for_generation,
    decode_text_request,
    text_response,
)


def _bytes(name: str, value: bytes) -> Tensor:
    data = np.empty(1, dtype=object)
    data[0] = value
    return Tensor(name, Datatype.BYTES, data)


def _bool(name: str, value: bool) -> Tensor:
    return Tensor(name, Datatype.BOOL, np.array([value]))


def _request(*inputs: Tensor, **parameters: object) -> InferRequest:
    return InferRequest(model_name="llm", inputs=inputs, id="r", parameters=parameters)


def test_defaults_follow_the_vllm_backend() -> None:
    plain = decode_text_request(_request(_bytes("text_input", b"Hello")))
    assert (plain.prompt, plain.stream, plain.prepend_prompt) == ("Hello", False, True)
    assert plain.parameters.max_tokens == 16
    streamed = decode_text_request(_request(_bytes("text_input", b"x"), _bool("stream", True)))
    assert (streamed.stream, streamed.prepend_prompt) == (True, False)


def test_sampling_from_the_tensor_or_from_request_parameters() -> None:
    given = decode_text_request(
        _request(
            _bytes("text_input", b"x"),
            _bytes("sampling_parameters", b'{"temperature": 0, "max_tokens": 3, "stop": "\\n"}'),
        )
    )
    assert (given.parameters.temperature, given.parameters.max_tokens) == (0, 3)
    assert given.parameters.stop_strings() == ("\n",)
    # Older clients send request parameters as strings; other parameters are not ours.
    legacy = decode_text_request(
        _request(
            _bytes("text_input", b"x"),
            temperature="0.1",
            top_p="0.95",
            triton_enable_empty_final_response=True,
        )
    )
    assert (legacy.parameters.temperature, legacy.parameters.top_p) == (0.1, 0.95)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (
            (
                _bytes("text_input", b"x"),
                _bool("stream", True),
                _bool("exclude_input_in_output", False),
            ),
            "When streaming",
        ),
        (
            (_bytes("text_input", b"x"), _bytes("sampling_parameters", b"{bad")),
            "input 'sampling_parameters'",
        ),
        ((_bytes("text_input", b"x"), _bytes("sampling_parameters", b'{"top_p": 0}')), "top_p"),
        ((_bytes("text_input", b"\xff"),), "must be UTF-8 text"),
        ((_bytes("text_input", b"x"), _bytes("image", b"")), "unknown input(s) ['image']"),
        (
            (Tensor("text_input", Datatype.BYTES, np.array([b"a", b"b"], dtype=object)),),
            "one element",
        ),
        ((_bytes("text_input", b"x"), _bytes("stream", b"yes")), "'stream' must be BOOL"),
    ],
)
def test_bad_requests_name_the_problem(inputs: tuple[Tensor, ...], message: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(message)):
        decode_text_request(_request(*inputs))


def test_routing_and_the_response_tensor() -> None:
    assert asks_for_generation(_request(_bytes("text_input", b"x")))
    assert not asks_for_generation(_request(_bytes("INPUT0", b"x")))
    response = text_response(_request(_bytes("text_input", b"x")), "1", "héllo", {})
    (output,) = response.outputs
    assert (output.name, output.datatype, output.data.tolist()) == (
        "text_output",
        Datatype.BYTES,
        ["héllo".encode()],
    )
    assert (response.id, response.model_version) == ("r", "1")
