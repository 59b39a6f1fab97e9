"""Inputs that used to reach a 5xx (issue 15, items 5 and 8): each is now a 400 (gRPC:
INVALID_ARGUMENT) naming the field, on every edge where the input can be expressed, and
strict validation refuses what was silently coerced."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import grpc
import numpy as np
import orjson
import pytest

from podserve.server.grpc._generated import inference_pb2 as pb
from tests.support.planes import Edges

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def rest_infer(
    both: Edges, model: str, body: dict[str, Any] | bytes, headers: dict[str, Any] | None = None
) -> tuple[int, str]:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    response = await both.rest.post(
        f"/v2/models/{model}/infer", content=content, headers=headers or {}
    )
    assert response.headers["content-type"] == "application/json"
    return response.status_code, response.json()["error"] if response.status_code != 200 else ""


async def grpc_infer(both: Edges, request: pb.ModelInferRequest) -> tuple[grpc.StatusCode, str]:
    try:
        await both.grpc.ModelInfer(request, timeout=30)
    except grpc.aio.AioRpcError as error:
        return error.code(), error.details() or ""
    return grpc.StatusCode.OK, ""


def iris_body(shape: list[int], data: list[Any], **extra: Any) -> dict[str, Any]:
    return {
        "inputs": [{"name": "features", "datatype": "FP32", "shape": shape, "data": data}],
        **extra,
    }


def grpc_request(
    model: str, name: str, datatype: str, shape: list[int], raw: bytes
) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name=name, datatype=datatype, shape=shape)
    request.raw_input_contents.append(raw)
    return request


# --- item 5: zero-row batches -------------------------------------------------------------


async def test_zero_rows_sklearn_rest(both: Edges) -> None:
    status, error = await rest_infer(both, "iris", iris_body([0, 4], []))
    assert status == 400
    assert "'features'" in error
    assert "0 rows" in error


async def test_zero_rows_embeddings_rest(both: Edges) -> None:
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [0], "data": []}]}
    status, error = await rest_infer(both, "minilm", body)
    assert status == 400
    assert "'text'" in error
    assert "0 rows" in error


async def test_zero_rows_sklearn_grpc(both: Edges) -> None:
    code, details = await grpc_infer(both, grpc_request("iris", "features", "FP32", [0, 4], b""))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "'features'" in details
    assert "0 rows" in details


async def test_zero_rows_embeddings_grpc(both: Edges) -> None:
    code, details = await grpc_infer(both, grpc_request("minilm", "text", "BYTES", [0], b""))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "'text'" in details
    assert "0 rows" in details


# --- item 5: huge dimensions on a zero-size tensor -----------------------------------------


@pytest.mark.parametrize("shape", [[0, 10**19], [0, 2**62, 2**62], [4, 0, 2**41]])
async def test_huge_dimensions_of_nothing_rest(both: Edges, shape: list[int]) -> None:
    status, error = await rest_infer(both, "iris", iris_body(shape, []))
    assert status == 400
    assert "'features'" in error
    assert "too large" in error


async def test_huge_dimensions_of_nothing_binary_rest(both: Edges) -> None:
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "features",
                    "datatype": "FP32",
                    "shape": [0, 2**62, 2**62],
                    "parameters": {"binary_data_size": 0},
                }
            ]
        }
    )
    headers = {"inference-header-content-length": str(len(header))}
    status, error = await rest_infer(both, "iris", header, headers)
    assert status == 400
    assert "too large" in error


@pytest.mark.parametrize("shape", [[0, 2**62, 2**62], [0, 2**63 - 1]])
async def test_huge_dimensions_of_nothing_grpc(both: Edges, shape: list[int]) -> None:
    code, details = await grpc_infer(both, grpc_request("iris", "features", "FP32", shape, b""))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "'features'" in details
    assert "too large" in details


# --- item 5: NaN timeouts and a Unicode digit in the header length --------------------------

ONE_ROW = [5.1, 3.5, 1.4, 0.2]


@pytest.mark.parametrize("value", ["NaN", "nan", "inf", "-1", True, 0, -5, "1e999"])
async def test_bad_timeout_parameter_rest(both: Edges, value: object) -> None:
    body = iris_body([1, 4], ONE_ROW, parameters={"timeout": value})
    status, error = await rest_infer(both, "iris", body)
    assert status == 400
    assert "parameters.timeout" in error


@pytest.mark.parametrize("header", ["NaN", "nan", "Infinity", "-3", "0", "abc", "1e999"])
async def test_bad_timeout_header_rest(both: Edges, header: str) -> None:
    status, error = await rest_infer(
        both, "iris", iris_body([1, 4], ONE_ROW), {"x-request-timeout-ms": header}
    )
    assert status == 400
    assert "x-request-timeout-ms" in error


def _timeout_param(param: pb.InferParameter, value: object) -> None:
    if isinstance(value, bool):
        param.bool_param = value
    elif isinstance(value, float):
        param.double_param = value
    elif isinstance(value, int):
        param.int64_param = value
    else:
        param.string_param = str(value)


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), -1.0, 0, -5, True, "NaN", "soon", "1e999"]
)
async def test_bad_timeout_parameter_grpc(both: Edges, value: object) -> None:
    """gRPC refuses exactly the timeouts REST refuses (item 8)."""
    raw = np.array([ONE_ROW], dtype="<f4").tobytes()
    request = grpc_request("iris", "features", "FP32", [1, 4], raw)
    _timeout_param(request.parameters["timeout"], value)
    code, details = await grpc_infer(both, request)
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "parameters.timeout" in details


@pytest.mark.parametrize("value", ["²", "١٢", "1²", " ", "-1", "0x10"])
async def test_header_length_must_be_ascii_digits(both: Edges, value: str) -> None:
    status, error = await rest_infer(
        both,
        "iris",
        iris_body([1, 4], ONE_ROW),
        {"inference-header-content-length": value.encode()},
    )
    assert status == 400
    assert "Inference-Header-Content-Length" in error


# --- item 8: strict tensor data ------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        [5.1, True, 1.4, 0.2],
        [False, 3, 1, 0],
        [[5.1, 3.5], [1.4, True]],
    ],
)
async def test_boolean_in_float_data_rest(both: Edges, data: list[Any]) -> None:
    status, error = await rest_infer(both, "iris", iris_body([1, 4], data))
    assert status == 400
    assert "'features'" in error
    assert "boolean" in error


async def test_boolean_in_integer_data_rest(both: Edges) -> None:
    body = {"inputs": [{"name": "x", "datatype": "INT32", "shape": [2], "data": [1, True]}]}
    response = await both.rest.post("/v2/models/iris/infer", json=body)
    assert response.status_code == 400
    assert "boolean" in response.json()["error"]


async def test_numbers_still_decode_when_the_body_mentions_true(both: Edges) -> None:
    """The search for booleans runs when the text spells `true` elsewhere, and finds none."""
    body = iris_body([1, 4], ONE_ROW, id="true-or-false")
    status, _ = await rest_infer(both, "iris", body)
    assert status == 200


async def test_bool_contents_for_fp32_grpc(both: Edges) -> None:
    request = pb.ModelInferRequest(model_name="iris")
    tensor = request.inputs.add(name="features", datatype="FP32", shape=[1, 4])
    tensor.contents.bool_contents.extend([True, False, True, True])
    code, details = await grpc_infer(both, request)
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "'features'" in details


# --- item 8: OpenAI's strict types and ranges ----------------------------------------------

COMPLETION = {"model": "tiny-lm", "prompt": "def add(a, b):", "max_tokens": 2}
CHAT = {"model": "tiny-lm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stream", "yes"),
        ("stream", 1),
        ("presence_penalty", 1e308),
        ("presence_penalty", -2.5),
        ("frequency_penalty", 3),
        ("frequency_penalty", "0"),
        ("temperature", 2.5),
        ("temperature", "0.5"),
        ("temperature", -0.1),
        ("top_p", 1.5),
        ("top_p", 0),
        ("n", "2"),
        ("n", 1.0),
        ("max_tokens", "5"),
        ("max_tokens", True),
        ("seed", 2**64),
        ("seed", "7"),
        ("stream_options", {"include_usage": "yes"}),
    ],
)
@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
async def test_openai_fields_strict(both: Edges, route: str, field: str, value: object) -> None:
    base = COMPLETION if route == "/v1/completions" else CHAT
    # the standard library's encoder: orjson refuses integers past 64 bits
    response = await both.rest.post(route, content=json.dumps({**base, field: value}))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert field in error["message"]


@pytest.mark.parametrize("value", [-2, 0.5, 2.0, None])
@pytest.mark.parametrize("field", ["presence_penalty", "frequency_penalty"])
@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
async def test_openai_penalty_in_range_is_applied_not_refused(
    both: Edges, route: str, field: str, value: float | None
) -> None:
    """The engine applies penalties (tests/generation/test_penalties*.py); any value in
    OpenAI's range, and null (OpenAI's "not given"), is accepted."""
    base = COMPLETION if route == "/v1/completions" else CHAT
    response = await both.rest.post(route, json={**base, field: value})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("field", "value"), [("presence_penalty", 2.5), ("frequency_penalty", "1")]
)
async def test_triton_generate_penalties_strict(both: Edges, field: str, value: object) -> None:
    """The penalties are shared sampling fields: Triton's generate takes them, range-checked."""
    body = {"text_input": "def", "parameters": {"max_tokens": 2, field: value}}
    response = await both.rest.post("/v2/models/tiny-lm/generate", json=body)
    assert response.status_code == 400, response.text
    assert field in response.json()["error"]
    ok = {"text_input": "def", "parameters": {"max_tokens": 2, field: 1}}
    assert (await both.rest.post("/v2/models/tiny-lm/generate", json=ok)).status_code == 200


async def test_openai_defaults_still_accepted(both: Edges) -> None:
    """What SDKs send by default (penalties of 0, integer temperature) still works."""
    body = {**COMPLETION, "presence_penalty": 0, "frequency_penalty": 0.0, "temperature": 1}
    response = await both.rest.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("field", "value"), [("input", 5), ("dimensions", "3"), ("encoding_format", "hex")]
)
async def test_embeddings_fields_strict(both: Edges, field: str, value: object) -> None:
    body = {"model": "minilm", "input": "hello", field: value}
    response = await both.rest.post("/v1/embeddings", content=orjson.dumps(body))
    assert response.status_code == 400, response.text
    assert field in response.json()["error"]["message"]


async def test_triton_generate_strict(both: Edges) -> None:
    body = {"text_input": "def", "parameters": {"max_tokens": "3"}}
    response = await both.rest.post("/v2/models/tiny-lm/generate", json=body)
    assert response.status_code == 400
    assert "max_tokens" in response.json()["error"]


async def grpc_generate(both: Edges, sampling: Mapping[str, object]) -> tuple[str, str]:
    """One decoupled ModelStreamInfer generation (the vLLM backend's tensors): the text of
    its one response (BYTES, length-prefixed) and the in-band error message, if any."""
    request = pb.ModelInferRequest(model_name="tiny-lm", id="penalties")
    text = request.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    text.contents.bytes_contents.append(b"The list of the list of the")
    params = request.inputs.add(name="sampling_parameters", datatype="BYTES", shape=[1])
    params.contents.bytes_contents.append(json.dumps(sampling).encode())
    out, errors = [], []
    async for reply in both.grpc.ModelStreamInfer(iter([request]), timeout=60):
        if reply.error_message:
            errors.append(reply.error_message)
            continue
        raw = reply.infer_response.raw_output_contents[0]
        out.append(raw[4 : 4 + int.from_bytes(raw[:4], "little")].decode())
    return "".join(out), "".join(errors)


async def test_grpc_generation_applies_and_checks_the_penalties(both: Edges) -> None:
    """gRPC's `sampling_parameters` are the same shared fields as REST's (penalties.py)."""
    sampling = {"temperature": 0, "max_tokens": 12, "ignore_eos": True}
    plain, error = await grpc_generate(both, sampling)
    assert not error
    penalised, error = await grpc_generate(both, {**sampling, "frequency_penalty": 2.0})
    assert not error
    assert penalised != plain
    rest = await both.rest.post(
        "/v2/models/tiny-lm/generate",
        json={
            "text_input": "The list of the list of the",
            "parameters": {**sampling, "frequency_penalty": 2.0},
        },
    )
    assert penalised.endswith(rest.json()["text_output"])
    _, error = await grpc_generate(both, {**sampling, "presence_penalty": 2.5})
    assert "presence_penalty" in error
