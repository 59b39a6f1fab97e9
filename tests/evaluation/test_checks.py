"""Each check kind passes what it should and fails with a reason that names what was seen."""

from __future__ import annotations

import math

import pytest

from podserve.evaluation.checks import contains, cosine, exact, json_schema, numeric, regex


@pytest.mark.parametrize(
    ("actual", "expected"),
    [
        ([0], 0),  # a one-element tensor equals its element
        (["positive"], "positive"),
        ([[1, 2], [3, 4]], [1, 2, 3, 4]),  # nested vs flat row-major data
        ([1, 2, 3, 4], [[1, 2], [3, 4]]),
        ("hello", "hello"),
        ({"a": [1, True]}, {"a": [1, True]}),
        ([True], True),
    ],
)
def test_exact_passes(actual: object, expected: object) -> None:
    assert exact(actual, expected).passed


@pytest.mark.parametrize(
    ("actual", "expected", "reason"),
    [
        ([1], 0, "got 1, expected 0"),
        (["negative"], "positive", 'got "negative", expected "positive"'),
        ([0, 1], 0, "got [0,1], expected 0"),
        ([1], True, "got 1, expected true"),  # Python's True == 1 must not pass
        ({"a": 1}, {"a": 1, "b": 2}, 'got {"a":1}, expected {"a":1,"b":2}'),
    ],
)
def test_exact_fails_with_reason(actual: object, expected: object, reason: str) -> None:
    verdict = exact(actual, expected)
    assert not verdict.passed
    assert verdict.reason == reason


def test_exact_reason_is_cut_to_report_size() -> None:
    verdict = exact("x" * 1000, "y")
    assert not verdict.passed
    assert len(verdict.reason) < 200
    assert "..." in verdict.reason


def test_contains() -> None:
    assert contains("The capital is Paris.", "Paris").passed
    assert contains(["a Paris b", "Paris"], "Paris").passed
    assert contains("PARIS", "paris", case_sensitive=False).passed
    verdict = contains("The capital is Lyon.", "Paris")
    assert not verdict.passed
    assert verdict.reason == '"The capital is Lyon." does not contain "Paris"'
    # Every element of a BYTES tensor must contain it.
    assert "Lyon" in contains(["Paris", "Lyon"], "Paris").reason
    assert contains("PARIS", "paris").reason.startswith('"PARIS" does not contain')
    assert contains([1.0], "1").reason == "expected text, got [1.0]"


def test_regex_searches_and_names_the_pattern() -> None:
    assert regex(["positive"], "^(positive|negative)$").passed
    assert regex("answer: 42", r"\d+").passed
    verdict = regex(["neutral"], "^(positive|negative)$")
    assert not verdict.passed
    assert verdict.reason == '"neutral" does not match /^(positive|negative)$/'
    assert regex(None, "x").reason == "expected text, got null"


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
}


def test_json_schema_parses_text_then_validates() -> None:
    assert json_schema('{"city": "Paris", "population": 2100000}', SCHEMA).passed
    assert json_schema({"city": "Paris", "population": 1}, SCHEMA).passed
    assert json_schema(['{"city": "Paris", "population": 1}'], SCHEMA).passed
    wrong_type = json_schema('{"city": "Paris", "population": "many"}', SCHEMA)
    assert not wrong_type.passed
    assert wrong_type.reason == "schema violation at population: 'many' is not of type 'integer'"
    missing = json_schema('{"city": "Paris"}', SCHEMA)
    assert missing.reason == "schema violation at (root): 'population' is a required property"
    assert json_schema("Paris, of course", SCHEMA).reason == '"Paris, of course" is not JSON'


def test_numeric_tolerances() -> None:
    assert numeric([0.5712], [0.5713], abs_tol=1e-3, rel_tol=0).passed
    assert numeric([100.0], 101.0, abs_tol=0, rel_tol=0.02).passed
    assert numeric([[0.1, 0.9]], [0.1, 0.9], abs_tol=1e-6, rel_tol=0).passed
    verdict = numeric([0.1, 0.5, 0.9], [0.1, 0.2, 0.95], abs_tol=0.01, rel_tol=0)
    assert not verdict.passed
    assert verdict.reason == (
        "2 of 3 values out of tolerance; worst [1]: 0.5 vs 0.2 (abs_tol 0.01, rel_tol 0)"
    )


def test_numeric_refuses_nan_shape_and_type_mismatches() -> None:
    assert "worst [0]: nan" in numeric([math.nan], [0.0], abs_tol=1e9, rel_tol=0).reason
    assert numeric([1.0, 2.0], [1.0], abs_tol=1, rel_tol=0).reason == "got 2 values, expected 1"
    assert numeric(["1.0"], [1.0], abs_tol=1, rel_tol=0).reason == 'expected numbers, got ["1.0"]'
    assert not numeric([True], [1.0], abs_tol=1, rel_tol=0).passed


def test_cosine() -> None:
    assert cosine([1.0, 0.0], [2.0, 0.0], minimum=0.999).passed
    assert cosine([0.6, 0.8], [0.8, 0.6], minimum=0.95).passed  # cos = 0.96
    verdict = cosine([1.0, 0.0], [0.0, 1.0], minimum=0.9)
    assert not verdict.passed
    assert verdict.reason == "cosine similarity 0.0000 below 0.9"
    assert cosine([1.0], [1.0, 0.0], minimum=0).reason == ("vector has 1 dimensions, expected 2")
    assert "zero" in cosine([0.0, 0.0], [1.0, 0.0], minimum=0).reason
    assert cosine("text", [1.0], minimum=0).reason == 'expected a vector, got "text"'
