"""What each endpoint kind sends and where its answer is: the request path and body of a
case, and the value of a response a check looks at."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from podserve.core.errors import InvalidInput
from podserve.evaluation.suite import Case, Endpoint, TensorData

OPENAI_PATHS: Mapping[Endpoint, str] = {
    "openai-chat": "/v1/chat/completions",
    "openai-completions": "/v1/completions",
    "openai-embeddings": "/v1/embeddings",
}
DEFAULT_PATHS: Mapping[Endpoint, str] = {
    "openai-chat": "choices.0.message.content",
    "openai-completions": "choices.0.text",
    "openai-embeddings": "data.0.embedding",
}


class Unselectable(Exception):
    """The response has no value where a check looks (the check fails with this reason)."""


def model_path(case: Case) -> str:
    assert case.model is not None  # Case validation: v2 cases name a model
    path = f"/v2/models/{quote(case.model, safe='')}"
    if case.version is not None:
        path += f"/versions/{quote(case.version, safe='')}"
    return path


def uses_row_form(case: Case) -> bool:
    """Row-form inputs take their datatype from the model's metadata."""
    return isinstance(case.inputs, dict) and any(
        not _is_tensor(value) for value in case.inputs.values()
    )


def _is_tensor(value: Any) -> bool:
    return isinstance(value, dict) and "datatype" in value and "data" in value


def _shape(value: Any, where: str) -> list[int]:
    if not isinstance(value, list):
        return []
    if not value:
        return [0]
    inner = [_shape(item, where) for item in value]
    if any(shape != inner[0] for shape in inner):
        raise InvalidInput(f"{where}: ragged nested list (rows differ in shape)")
    return [len(value), *inner[0]]


def _flat(value: Any) -> list[Any]:
    if isinstance(value, list):
        return [item for element in value for item in _flat(element)]
    return [value]


def _inferred_datatype(data: list[Any]) -> str:
    if data and all(isinstance(x, bool) for x in data):
        return "BOOL"
    if data and all(isinstance(x, str) for x in data):
        return "BYTES"
    if data and all(isinstance(x, int) and not isinstance(x, bool) for x in data):
        return "INT64"
    return "FP32"


def v2_inputs(case: Case, datatypes: Mapping[str, str]) -> list[dict[str, Any]]:
    """The OIP `inputs` list. A row-form value is one example: the batch dimension (1) is
    added, and the datatype comes from the model's metadata (`datatypes`), or is inferred
    from the values when the model does not say."""
    if isinstance(case.inputs, list):
        return [dict(item) for item in case.inputs]
    result = []
    for name, value in (case.inputs or {}).items():
        where = f"case {case.id}: input {name}"
        if _is_tensor(value):
            tensor = TensorData.model_validate(value)
            result.append({"name": name, **tensor.model_dump()})
            continue
        data = _flat(value)
        result.append(
            {
                "name": name,
                "datatype": datatypes.get(name) or _inferred_datatype(data),
                "shape": [1, *_shape(value, where)],
                "data": data,
            }
        )
    return result


def request_of(case: Case, datatypes: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) for one case."""
    if case.endpoint == "v2":
        body: dict[str, Any] = {"id": case.id, "inputs": v2_inputs(case, datatypes)}
        if case.parameters:
            body["parameters"] = case.parameters
        return f"{model_path(case)}/infer", body
    assert case.body is not None  # Case validation: OpenAI cases carry a body
    return OPENAI_PATHS[case.endpoint], case.body


def _walk(document: Any, path: str) -> Any:
    node = document
    walked: list[str] = []
    for step in path.split("."):
        if isinstance(node, list) and step.lstrip("-").isdigit():
            index = int(step)
            if not -len(node) <= index < len(node):
                raise Unselectable(f"no item {step} at {'.'.join(walked) or '(root)'}")
            node = node[index]
        elif isinstance(node, dict) and step in node:
            node = node[step]
        else:
            raise Unselectable(f"no {step!r} at {'.'.join(walked) or '(root)'}")
        walked.append(step)
    return node


def _v2_output(document: Any, name: str | None) -> Any:
    outputs = document.get("outputs") if isinstance(document, dict) else None
    if not isinstance(outputs, list):
        raise Unselectable("the response has no outputs list")
    names = [str(o.get("name")) for o in outputs if isinstance(o, dict)]
    if name is None:
        if len(outputs) != 1:
            raise Unselectable(f"name the output to check (outputs: {', '.join(names)})")
        chosen = outputs[0]
    else:
        found = [o for o in outputs if isinstance(o, dict) and o.get("name") == name]
        if not found:
            raise Unselectable(f"no output {name!r} (outputs: {', '.join(names)})")
        chosen = found[0]
    if "data" not in chosen:
        raise Unselectable(f"output {chosen.get('name')!r} came as binary data, not JSON")
    return chosen["data"]


def select(endpoint: Endpoint, document: Any, output: str | None) -> Any:
    """The value a check looks at: a v2 output tensor's data, or the value at a dotted
    path of an OpenAI response."""
    if endpoint == "v2":
        return _v2_output(document, output)
    return _walk(document, output or DEFAULT_PATHS[endpoint])
