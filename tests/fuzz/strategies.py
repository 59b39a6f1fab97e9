"""Hypothesis strategies for malformed (and sometimes valid) requests: Open Inference
Protocol v2 JSON bodies, the binary-data extension, gRPC ModelInferRequests and OpenAI
embeddings bodies. Built around the real models' inputs so that many examples get past
the first check and exercise the deeper ones."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from podserve.core.tensors import Datatype
from podserve.server.grpc._generated import inference_pb2 as pb

DATATYPES = [d.value for d in Datatype]
MODELS = ["iris", "minilm", "double", "nope"]
INPUT_NAMES = ["features", "text", "x", "", "y"]

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
dims = st.integers(min_value=-2, max_value=6) | st.sampled_from([0, 2**31, 2**62, 10**19])
shapes = st.lists(dims, max_size=4) | json_values
datatypes = st.sampled_from(DATATYPES) | json_values


@st.composite
def tensor_data(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["floats", "ints", "bools", "strings", "nested", "any"]))
    size = draw(st.integers(min_value=0, max_value=12))
    if kind == "floats":
        return draw(
            st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=size, max_size=size)
        )
    if kind == "ints":
        return draw(st.lists(st.integers(-(2**65), 2**65), min_size=size, max_size=size))
    if kind == "bools":
        return draw(st.lists(st.booleans(), min_size=size, max_size=size))
    if kind == "strings":
        return draw(st.lists(st.text(max_size=5), min_size=size, max_size=size))
    if kind == "nested":
        return draw(st.lists(st.lists(json_scalars, max_size=4), max_size=4))
    return draw(json_values)


parameters = (
    st.dictionaries(
        st.sampled_from(["timeout", "binary_data_size", "binary_data", "priority", "x"]),
        json_values,
        max_size=3,
    )
    | json_values
)


@st.composite
def infer_inputs(draw: st.DrawFn) -> Any:
    item: dict[str, Any] = {}
    if draw(st.booleans()):
        item["name"] = draw(st.sampled_from(INPUT_NAMES) | json_values)
    if draw(st.integers(0, 9)):
        item["datatype"] = draw(datatypes)
    if draw(st.integers(0, 9)):
        item["shape"] = draw(shapes)
    if draw(st.integers(0, 9)):
        item["data"] = draw(tensor_data())
    if draw(st.booleans()):
        item["parameters"] = draw(parameters)
    return item if draw(st.integers(0, 19)) else draw(json_values)


@st.composite
def infer_bodies(draw: st.DrawFn) -> Any:
    body: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        body["inputs"] = draw(st.lists(infer_inputs(), max_size=3) | json_values)
    if draw(st.booleans()):
        body["outputs"] = draw(
            st.lists(
                st.fixed_dictionaries(
                    {"name": st.text(max_size=5)}, optional={"parameters": parameters}
                ),
                max_size=2,
            )
            | json_values
        )
    if draw(st.booleans()):
        body["parameters"] = draw(parameters)
    if draw(st.booleans()):
        body["id"] = draw(json_values)
    return body if draw(st.integers(0, 19)) else draw(json_values)


header_lengths = (
    st.none()
    | st.integers(min_value=-5, max_value=300).map(str)
    | st.sampled_from(["²", "\u0661", " 3", "0x10", "", "1e3", "99999999999999999999"])
)


@st.composite
def grpc_requests(draw: st.DrawFn) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=draw(st.sampled_from(MODELS)))
    raw = draw(st.booleans())
    for _ in range(draw(st.integers(0, 2))):
        tensor = request.inputs.add(
            name=draw(st.sampled_from(INPUT_NAMES)),
            datatype=draw(st.sampled_from(DATATYPES) | st.text(max_size=5)),
            shape=draw(
                st.lists(st.integers(-3, 6) | st.sampled_from([0, 2**62, 2**63 - 1]), max_size=4)
            ),
        )
        if raw:
            request.raw_input_contents.append(draw(st.binary(max_size=64)))
        else:
            field = draw(
                st.sampled_from(
                    [
                        "fp32_contents",
                        "int_contents",
                        "int64_contents",
                        "bool_contents",
                        "bytes_contents",
                        "uint_contents",
                    ]
                )
            )
            values = {
                "fp32_contents": st.floats(width=32),
                "int_contents": st.integers(-(2**31), 2**31 - 1),
                "int64_contents": st.integers(-(2**63), 2**63 - 1),
                "bool_contents": st.booleans(),
                "bytes_contents": st.binary(max_size=8),
                "uint_contents": st.integers(0, 2**32 - 1),
            }[field]
            getattr(tensor.contents, field).extend(draw(st.lists(values, max_size=8)))
    if draw(st.booleans()):
        param = request.parameters[
            draw(st.sampled_from(["timeout", "priority", "binary_data_output"]))
        ]
        choice = draw(st.sampled_from(["bool", "int", "double", "string"]))
        if choice == "bool":
            param.bool_param = draw(st.booleans())
        elif choice == "int":
            param.int64_param = draw(st.integers(-(2**63), 2**63 - 1))
        elif choice == "double":
            param.double_param = draw(st.floats())
        else:
            param.string_param = draw(st.text(max_size=6))
    if draw(st.booleans()):
        request.outputs.add(name=draw(st.text(max_size=6)))
    return request


embedding_bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["minilm", "iris", "nope"]) | json_values,
        "input": st.text(max_size=20) | st.lists(st.text(max_size=10), max_size=3) | json_values,
        "encoding_format": st.sampled_from(["float", "base64", "hex"]) | json_values,
        "dimensions": st.integers(-2, 500) | json_values,
    },
)


# --- near-valid requests: one valid request per model, then one or two fields replaced -----
VALID: dict[str, dict[str, Any]] = {
    "iris": {"name": "features", "datatype": "FP32", "shape": [1, 4], "data": [5.1, 3.5, 1.4, 0.2]},
    "double": {"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1.0, 2.0, 3.0]},
    "minilm": {"name": "text", "datatype": "BYTES", "shape": [1], "data": ["hello"]},
}
small_dims = st.integers(min_value=0, max_value=4) | st.sampled_from([2**40, 2**62, 10**19])


@st.composite
def near_valid(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    model = draw(st.sampled_from(sorted(VALID)))
    tensor = dict(VALID[model])
    body: dict[str, Any] = {"inputs": [tensor]}
    for field in draw(
        st.lists(
            st.sampled_from(["shape", "data", "datatype", "parameters", "timeout"]),
            min_size=1,
            max_size=2,
            unique=True,
        )
    ):
        if field == "shape":
            tensor["shape"] = draw(st.lists(small_dims, min_size=1, max_size=3))
        elif field == "data":
            tensor["data"] = draw(tensor_data())
        elif field == "datatype":
            tensor["datatype"] = draw(st.sampled_from(DATATYPES))
        elif field == "parameters":
            tensor["parameters"] = draw(parameters)
        else:
            body["parameters"] = {
                "timeout": draw(json_scalars | st.sampled_from(["NaN", "inf", "-1"]))
            }
    if draw(st.booleans()) and "shape" in tensor and isinstance(tensor["shape"], list):
        # data sized to the shape, so the element-count check passes and deeper ones run
        count = 1
        for dim in tensor["shape"]:
            count *= dim
        if count <= 12:
            tensor["data"] = draw(
                st.lists(
                    st.floats(allow_nan=False, allow_infinity=False)
                    | st.booleans()
                    | st.text(max_size=3),
                    min_size=count,
                    max_size=count,
                )
            )
    return model, body
