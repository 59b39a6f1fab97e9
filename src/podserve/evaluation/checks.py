"""One function per check kind. Each takes the selected value and the expectation and returns
a `Verdict`; a failure's reason says what was seen and what was expected, short enough for a
report line."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import orjson

from podserve.core.errors import InvalidInput
from podserve.evaluation.suite import (
    Check,
    ContainsCheck,
    ExactCheck,
    JsonSchemaCheck,
    NumericCheck,
    RegexCheck,
)

_SHOWN_CHARS = 120


@dataclass(frozen=True, slots=True)
class Verdict:
    passed: bool
    reason: str = ""


PASS = Verdict(True)


def shown(value: Any) -> str:
    """A value as JSON, cut to a report-sized length."""
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def _flat(value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        return [item for element in value for item in _flat(element)]
    return [value]


def _texts(value: Any) -> list[str] | None:
    """A string, or the strings of a (possibly nested) BYTES tensor; None when not text."""
    items = _flat(value)
    return items if items and all(isinstance(item, str) for item in items) else None


def _same(a: Any, b: Any) -> bool:
    """JSON equality, except that a boolean equals only a boolean (Python says True == 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def exact(actual: Any, expected: Any) -> Verdict:
    """Equal as JSON values. A tensor of one element also equals that element, and a nested
    expectation equals a tensor's flat (row-major) data."""
    candidate = actual
    if isinstance(actual, list) and not isinstance(expected, list):
        flat = _flat(actual)
        candidate = flat[0] if len(flat) == 1 else actual
    elif isinstance(actual, list):
        candidate, expected = _flat(actual), _flat(expected)
    if _same(candidate, expected):
        return PASS
    return Verdict(False, f"got {shown(candidate)}, expected {shown(expected)}")


def contains(actual: Any, needle: str, *, case_sensitive: bool = True) -> Verdict:
    texts = _texts(actual)
    if texts is None:
        return Verdict(False, f"expected text, got {shown(actual)}")
    for text in texts:
        haystack, wanted = (text, needle) if case_sensitive else (text.lower(), needle.lower())
        if wanted not in haystack:
            return Verdict(False, f"{shown(text)} does not contain {shown(needle)}")
    return PASS


def regex(actual: Any, pattern: str) -> Verdict:
    """`re.search` on every text (anchor with ^ and $ for a whole match)."""
    texts = _texts(actual)
    if texts is None:
        return Verdict(False, f"expected text, got {shown(actual)}")
    compiled = re.compile(pattern)
    for text in texts:
        if compiled.search(text) is None:
            return Verdict(False, f"{shown(text)} does not match /{pattern}/")
    return PASS


def _jsonschema() -> ModuleType:
    try:
        import jsonschema
    except ImportError:  # an optional dependency: only json_schema checks need it
        raise InvalidInput(
            "json_schema checks need jsonschema: pip install 'podserve[eval]'"
        ) from None
    return jsonschema


def check_schema(schema: dict[str, Any]) -> None:
    """Raise ValueError when `schema` is not a valid JSON Schema (a suite error)."""
    jsonschema = _jsonschema()
    validator = jsonschema.validators.validator_for(schema)
    try:
        validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"not a valid JSON Schema: {exc.message}") from None


def json_schema(actual: Any, schema: dict[str, Any]) -> Verdict:
    """Validate the value; a string (a chat reply, a BYTES element) is parsed as JSON first,
    which is how structured output arrives."""
    jsonschema = _jsonschema()
    if isinstance(actual, list) and len(actual) == 1 and isinstance(actual[0], str):
        actual = actual[0]
    if isinstance(actual, str):
        try:
            actual = orjson.loads(actual)
        except orjson.JSONDecodeError:
            return Verdict(False, f"{shown(actual)} is not JSON")
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(actual))
    if error is None:
        return PASS
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return Verdict(False, f"schema violation at {where}: {error.message}")


def _numbers(value: Any) -> list[float] | None:
    items = _flat(value)
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in items):
        return None
    return [float(x) for x in items]


def numeric(actual: Any, expected: Any, *, abs_tol: float, rel_tol: float) -> Verdict:
    """Element-wise |actual - expected| <= abs_tol + rel_tol * |expected| (numpy's allclose
    rule) over the flat data; NaN never passes."""
    got, want = _numbers(actual), _numbers(expected)
    if got is None:
        return Verdict(False, f"expected numbers, got {shown(actual)}")
    if want is None:
        return Verdict(False, f"the expectation is not numeric: {shown(expected)}")
    if len(got) != len(want):
        return Verdict(False, f"got {len(got)} values, expected {len(want)}")
    worst: tuple[float, int] | None = None
    failed = 0
    for index, (a, e) in enumerate(zip(got, want, strict=True)):
        allowed = abs_tol + rel_tol * abs(e)
        error = abs(a - e)
        if not error <= allowed:  # written so that NaN fails
            failed += 1
            excess = math.inf if math.isnan(error) else error - allowed
            if worst is None or excess > worst[0]:
                worst = (excess, index)
    if worst is None:
        return PASS
    index = worst[1]
    return Verdict(
        False,
        f"{failed} of {len(got)} values out of tolerance; worst [{index}]: {got[index]:.6g} vs "
        f"{want[index]:.6g} (abs_tol {abs_tol:g}, rel_tol {rel_tol:g})",
    )


def cosine(actual: Any, expected: Sequence[float], *, minimum: float) -> Verdict:
    got = _numbers(actual)
    if got is None:
        return Verdict(False, f"expected a vector, got {shown(actual)}")
    if len(got) != len(expected):
        return Verdict(False, f"vector has {len(got)} dimensions, expected {len(expected)}")
    norms = math.sqrt(sum(a * a for a in got)) * math.sqrt(sum(e * e for e in expected))
    if norms == 0 or math.isnan(norms):
        return Verdict(False, "cosine undefined: a zero (or NaN) vector")
    similarity = sum(a * e for a, e in zip(got, expected, strict=True)) / norms
    if similarity >= minimum:
        return PASS
    return Verdict(False, f"cosine similarity {similarity:.4f} below {minimum:g}")


def apply(check: Check, actual: Any) -> Verdict:
    """Run one check on the value selected for it."""
    if isinstance(check, ExactCheck):
        return exact(actual, check.value)
    if isinstance(check, ContainsCheck):
        return contains(actual, check.value, case_sensitive=check.case_sensitive)
    if isinstance(check, RegexCheck):
        return regex(actual, check.pattern)
    if isinstance(check, JsonSchemaCheck):
        return json_schema(actual, check.json_schema)
    if isinstance(check, NumericCheck):
        return numeric(actual, check.value, abs_tol=check.abs_tol, rel_tol=check.rel_tol)
    return cosine(actual, check.value, minimum=check.min)
