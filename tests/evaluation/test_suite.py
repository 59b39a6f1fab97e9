"""The golden-set schema: what a case may say, the errors a bad suite gets, and the request
each endpoint kind sends."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from podserve.core.errors import InvalidInput
from podserve.evaluation.endpoints import Unselectable, request_of, select, uses_row_form
from podserve.evaluation.suite import Case, parse_suite

IRIS = {
    "id": "setosa",
    "tags": ["iris"],
    "model": "iris",
    "inputs": {"features": [5.1, 3.5, 1.4, 0.2]},
    "expect": [{"kind": "exact", "output": "label", "value": 0}],
}


def jsonl(*cases: dict[str, Any]) -> str:
    return "\n".join(orjson.dumps(case).decode() for case in cases) + "\n"


def test_parse_keeps_order_skips_blank_and_comment_lines() -> None:
    text = "# golden set\n\n" + jsonl(IRIS, {**IRIS, "id": "second", "tags": []})
    suite = parse_suite(text, "iris")
    assert suite.name == "iris"
    assert [case.id for case in suite.cases] == ["setosa", "second"]
    assert suite.tags() == ["iris"]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ({**IRIS, "model": None}, "a v2 case needs model and inputs"),
        ({**IRIS, "body": {"x": 1}}, "a v2 case sends inputs, not a body"),
        (
            {"id": "c", "endpoint": "openai-chat", "expect": IRIS["expect"]},
            "an openai-chat case needs a body",
        ),
        (
            {**IRIS, "endpoint": "openai-embeddings", "body": {"input": "x"}},
            "puts model and inputs in its body",
        ),
        ({**IRIS, "expect": []}, "expect: List should have at least 1 item"),
        ({**IRIS, "expect": [{"kind": "fuzzy"}]}, "expect.0: Input tag 'fuzzy'"),
        ({**IRIS, "expect": [{"kind": "regex", "pattern": "("}]}, "not a regular expression"),
        (
            {**IRIS, "expect": [{"kind": "json_schema", "schema": {"type": "nope"}}]},
            "not a valid JSON Schema",
        ),
        ({**IRIS, "tags": ["all"]}, "tag 'all' is reserved"),
        ({**IRIS, "surprise": 1}, "surprise: Extra inputs are not permitted"),
        ({**IRIS, "expect": [{"kind": "cosine", "value": [1.0], "min": 2}]}, "min"),
    ],
)
def test_bad_cases_name_line_and_field(case: dict[str, Any], message: str) -> None:
    text = jsonl(IRIS, case).replace('"setosa"', '"first"', 1)
    with pytest.raises(InvalidInput) as info:
        parse_suite(text, "s", "golden.jsonl")
    assert info.value.message.startswith("golden.jsonl:2: ")
    assert message in info.value.message


def test_duplicate_ids_not_json_and_empty_suites_are_refused() -> None:
    with pytest.raises(InvalidInput, match=r"g:2: case id 'setosa' repeats line 1"):
        parse_suite(jsonl(IRIS, IRIS), "s", "g")
    with pytest.raises(InvalidInput, match="g:1: not JSON"):
        parse_suite("{nope\n", "s", "g")
    with pytest.raises(InvalidInput, match="g holds no cases"):
        parse_suite("# only a comment\n", "s", "g")


def case(**fields: Any) -> Case:
    return Case.model_validate({**IRIS, **fields})


def test_row_form_adds_the_batch_dimension_and_takes_metadata_datatypes() -> None:
    row = case(inputs={"features": [5, 3, 1, 0]})
    assert uses_row_form(row)
    path, body = request_of(row, {"features": "FP32"})
    assert path == "/v2/models/iris/infer"
    assert body["inputs"] == [
        {"name": "features", "datatype": "FP32", "shape": [1, 4], "data": [5, 3, 1, 0]}
    ]
    # Without metadata the datatype is inferred from the values.
    _, body = request_of(row, {})
    assert body["inputs"][0]["datatype"] == "INT64"
    _, body = request_of(case(model="sentiment", inputs={"text": "great"}), {})
    assert body["inputs"] == [
        {"name": "text", "datatype": "BYTES", "shape": [1], "data": ["great"]}
    ]


def test_explicit_and_list_forms_are_sent_as_given() -> None:
    tensor = {"datatype": "FP32", "shape": [2, 2], "data": [1, 2, 3, 4]}
    explicit = case(inputs={"features": tensor}, version="2", parameters={"p": 1})
    assert not uses_row_form(explicit)
    path, body = request_of(explicit, {})
    assert path == "/v2/models/iris/versions/2/infer"
    assert body == {
        "id": "setosa",
        "inputs": [{"name": "features", **tensor}],
        "parameters": {"p": 1},
    }
    listed = case(inputs=[{"name": "features", **tensor}])
    assert request_of(listed, {})[1]["inputs"] == [{"name": "features", **tensor}]


def test_ragged_rows_are_an_invalid_case() -> None:
    with pytest.raises(InvalidInput, match="ragged"):
        request_of(case(inputs={"features": [[1.0, 2.0], [3.0]]}), {})


def test_openai_bodies_go_to_their_path_unchanged() -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    chat = Case.model_validate(
        {"id": "c", "endpoint": "openai-chat", "body": body, "expect": IRIS["expect"]}
    )
    assert request_of(chat, {}) == ("/v1/chat/completions", body)


V2_RESPONSE = {
    "outputs": [
        {"name": "label", "datatype": "BYTES", "shape": [1], "data": ["positive"]},
        {"name": "score", "datatype": "FP32", "shape": [1], "data": [0.9]},
    ]
}


def test_select_v2_outputs() -> None:
    assert select("v2", V2_RESPONSE, "score") == [0.9]
    only = {"outputs": V2_RESPONSE["outputs"][:1]}
    assert select("v2", only, None) == ["positive"]
    with pytest.raises(Unselectable, match=r"name the output to check \(outputs: label, score\)"):
        select("v2", V2_RESPONSE, None)
    with pytest.raises(Unselectable, match="no output 'probabilities'"):
        select("v2", V2_RESPONSE, "probabilities")
    binary = {"outputs": [{"name": "y", "parameters": {"binary_data_size": 4}}]}
    with pytest.raises(Unselectable, match="binary data"):
        select("v2", binary, "y")


def test_select_openai_paths() -> None:
    chat = {"choices": [{"message": {"content": "Paris"}}], "usage": {"completion_tokens": 2}}
    assert select("openai-chat", chat, None) == "Paris"
    assert select("openai-chat", chat, "usage.completion_tokens") == 2
    assert select("openai-completions", {"choices": [{"text": "ok"}]}, None) == "ok"
    assert select("openai-embeddings", {"data": [{"embedding": [0.1, 0.2]}]}, None) == [0.1, 0.2]
    with pytest.raises(Unselectable, match="no item 1 at choices"):
        select("openai-chat", chat, "choices.1.message")
    with pytest.raises(Unselectable, match=r"no 'content' at choices\.0"):
        select("openai-chat", {"choices": [{"delta": {}}]}, "choices.0.content")
