"""Round-trip invariants: a response we encode, read back as a request by our own decoder
(same tensor wire format) or by tritonclient, gives back the exact arrays — every
datatype, random shapes including zero-size dimensions, JSON and binary."""

from __future__ import annotations

from typing import Any

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import numpy as np
import numpy.typing as npt
import orjson
import tritonclient.http as triton
from hypothesis import given, settings

from podserve.core.tensors import Datatype, InferResponse, Tensor
from podserve.protocol.v2 import decode_infer_request, encode_infer_response

# Timing varies on shared CI cores; the examples are small, a deadline would only flake.
roundtrip_settings = settings(deadline=None, max_examples=60)

SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


@st.composite
def tensors(draw: st.DrawFn, datatype: Datatype, utf8_only: bool = False) -> Tensor:
    shape = draw(SHAPES)
    if datatype is Datatype.BYTES:
        count = int(np.prod(shape))
        element = (
            st.text(st.characters(codec="utf-8"), max_size=8).map(str.encode)
            if utf8_only
            else st.binary(max_size=8)
        )
        items = draw(st.lists(element, min_size=count, max_size=count))
        data = np.empty(count, dtype=object)
        data[:] = items
        return Tensor("t", datatype, data.reshape(shape))
    # Default elements cover the whole range: NaN, infinities, -0.0, subnormals, limits.
    return Tensor("t", datatype, draw(hnp.arrays(datatype.numpy_dtype, shape)))


def _same(got: npt.NDArray[Any], want: npt.NDArray[Any]) -> bool:
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if want.dtype.kind == "f":
        return got.tobytes() == want.tobytes()  # bit for bit, NaN and -0.0 included
    return bool(got.tolist() == want.tolist())


def _as_request(body: bytes, header_length: int | None) -> tuple[bytes, int | None]:
    """A response body turned into a request body: outputs and inputs share one schema."""
    header = body if header_length is None else body[:header_length]
    tail = b"" if header_length is None else body[header_length:]
    new_header = orjson.dumps({"inputs": orjson.loads(header)["outputs"]})
    return new_header + tail, (None if header_length is None else len(new_header))


@st.composite
def responses(draw: st.DrawFn) -> tuple[InferResponse, bool]:
    datatype = draw(st.sampled_from(list(Datatype)))
    count = draw(st.integers(min_value=1, max_value=3))
    outputs = tuple(Tensor(f"out{i}", datatype, draw(tensors(datatype)).data) for i in range(count))
    return InferResponse(model_name="m", outputs=outputs), draw(st.booleans())


@roundtrip_settings
@given(responses())
def test_encoded_response_decodes_as_request(case: tuple[InferResponse, bool]) -> None:
    response, binary = case
    body, header_length = encode_infer_response(response, binary_outputs=binary)
    request_body, request_header_length = _as_request(body, header_length)

    request = decode_infer_request(
        request_body, model_name="m", model_version=None, header_length=request_header_length
    )

    assert [t.name for t in request.inputs] == [t.name for t in response.outputs]
    for got, want in zip(request.inputs, response.outputs, strict=True):
        assert got.datatype is want.datatype
        assert _same(got.data, want.data)


@roundtrip_settings
@given(responses())
def test_encoded_response_parses_in_tritonclient(case: tuple[InferResponse, bool]) -> None:
    response, binary = case
    body, header_length = encode_infer_response(response, binary_outputs=binary)

    result = triton.InferenceServerClient.parse_response_body(body, header_length=header_length)

    for want in response.outputs:
        got = result.as_numpy(want.name)
        if got.dtype == object and got.size and isinstance(got.flat[0], str):
            got = np.vectorize(lambda s: s.encode(), otypes=[object])(got)
        assert _same(got, want.data)


@roundtrip_settings
@given(st.data())
def test_tritonclient_request_decodes_exactly(data: st.DataObject) -> None:
    datatype = data.draw(st.sampled_from(list(Datatype)))
    binary = data.draw(st.booleans())
    # The client refuses non-UTF-8 BYTES and writes NaN/inf as invalid JSON when not binary.
    tensor = data.draw(tensors(datatype, utf8_only=not binary))
    if not binary and datatype.numpy_dtype.kind == "f":
        finite = np.nan_to_num(tensor.data, posinf=1.0, neginf=-1.0)
        tensor = Tensor("t", datatype, np.asarray(finite, dtype=datatype.numpy_dtype))
    item = triton.InferInput("t", list(tensor.shape), datatype.value)
    item.set_data_from_numpy(tensor.data, binary_data=binary)
    body, json_size = triton.InferenceServerClient.generate_request_body([item])

    request = decode_infer_request(
        body, model_name="m", model_version=None, header_length=json_size
    )

    assert _same(request.inputs[0].data, tensor.data)


def test_every_fp16_value_survives_json() -> None:
    """All 63,488 finite half floats, through our JSON output and back through both our
    decoder and the client's parser."""
    bits = np.arange(2**16, dtype=np.uint16)
    values = bits.view(np.float16)
    values = values[np.isfinite(values)]
    _assert_json_float_roundtrip(values)


def test_fp32_values_survive_json() -> None:
    """Two million random bit patterns plus the boundaries: orjson writes the shortest
    float32 text, read as a double and rounded to float32 it must give the same bits."""
    rng = np.random.default_rng(20240501)
    bits = rng.integers(0, 2**32, size=2_000_000, dtype=np.uint64).astype(np.uint32)
    edges = np.array(
        [0x00000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0x80000001, 0xFF7FFFFF, 0x3F800001],
        dtype=np.uint32,
    )
    values = np.concatenate([bits, edges]).view(np.float32)
    _assert_json_float_roundtrip(values[np.isfinite(values)])


def _assert_json_float_roundtrip(values: npt.NDArray[Any]) -> None:
    response = InferResponse(model_name="m", outputs=(Tensor.from_array("f", values),))
    body, header_length = encode_infer_response(response, binary_outputs=False)
    assert header_length is None  # finite values stay JSON

    ours = decode_infer_request(
        _as_request(body, None)[0], model_name="m", model_version=None, header_length=None
    )
    assert ours.inputs[0].data.tobytes() == values.tobytes()
    theirs = triton.InferenceServerClient.parse_response_body(body).as_numpy("f")
    assert theirs.tobytes() == values.tobytes()
