"""The CRDs' CEL rules (`x-kubernetes-validations`), evaluated with cel-python the way the
API server applies them on create (apiextensions-apiserver pkg/apiserver/schema/cel,
validation.go; k8s.io/apiserver/pkg/cel):

1. structural defaults first (a CRD's `default`s are filled in before validation, so
   `self.kind != 'Service' || has(self.port)` sees the defaulted `kind`);
2. each schema node's rules run with `self` bound to that node's value, for every present
   node (list items one by one, map values one by one); an absent field runs no rules;
3. object properties are CEL fields with Kubernetes' escaping (`namespace` is a CEL keyword,
   so the field is `__namespace__`; `-` → `__dash__`, `.` → `__dot__`, `/` → `__slash__`);
4. transition rules (those that read `oldSelf`) do not run on create; with
   `optionalOldSelf: true` they would run with `oldSelf` unset, which needs CEL optionals
   cel-python lacks, so those are counted as not evaluated;
5. a failure reads `<path>: Invalid value: "<type>": <message>` (or the rule's `reason`:
   Forbidden, Required value, Duplicate value), the message from `messageExpression`,
   `message`, or `failed rule: <rule>`; an evaluation error is an error too.

Kubernetes' CEL extension libraries (quantity(), url(), isURL(), ...) are not in
cel-python: a rule that calls one is reported as a warning that it was not evaluated."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from podserve.kube.apiserver.errors import (
    CEL_VALIDATION,
    ErrorType,
    FieldError,
    Path,
    object_label,
)
from podserve.kube.types import Manifest, Severity
from podserve.kube.validation import CrdCatalog

# CEL keywords and reserved words (the CEL spec's lexis), escaped as `__<word>__`.
_RESERVED = frozenset(
    (
        "true", "false", "null", "in", "as", "break", "const", "continue", "else", "for",
        "function", "if", "import", "let", "loop", "package", "namespace", "return", "var",
        "void", "while",
    )
)  # fmt: skip
_OLD_SELF = re.compile(r"\boldSelf\b")
_REASONS = {
    "FieldValueInvalid": ErrorType.INVALID,
    "FieldValueForbidden": ErrorType.FORBIDDEN,
    "FieldValueRequired": ErrorType.REQUIRED,
    "FieldValueDuplicate": ErrorType.DUPLICATE,
}


def escape(name: str) -> str:
    """k8s.io/apiserver/pkg/cel escaping of a property name into a CEL field name."""
    if name in _RESERVED:
        return f"__{name}__"
    return (
        name.replace("__", "__underscores__")
        .replace(".", "__dot__")
        .replace("-", "__dash__")
        .replace("/", "__slash__")
    )


def _sub(schema: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    props = schema.get("properties") or {}
    if key in props:
        return dict(props[key])
    extra = schema.get("additionalProperties")
    return dict(extra) if isinstance(extra, Mapping) else {}


def _items(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    value = schema.get("items")
    return value if isinstance(value, Mapping) else {}


def apply_defaults(schema: Mapping[str, Any], value: Any) -> Any:
    """The structural defaulting the API server runs before validation."""
    if isinstance(value, dict):
        out = dict(value)
        for name, sub in (schema.get("properties") or {}).items():
            if name not in out and isinstance(sub, Mapping) and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
        return {k: apply_defaults(_sub(schema, k), v) for k, v in out.items()}
    if isinstance(value, list):
        inner = _items(schema)
        return [apply_defaults(inner, v) for v in value]
    return value


def to_cel(schema: Mapping[str, Any], value: Any) -> Any:
    """A JSON value as the CEL value `self` is bound to."""
    from celpy import celtypes

    if isinstance(value, dict):
        is_object = bool(schema.get("properties"))
        return celtypes.MapType(
            {
                celtypes.StringType(escape(k) if is_object else k): to_cel(_sub(schema, k), v)
                for k, v in value.items()
            }
        )
    if isinstance(value, list):
        inner = _items(schema)
        return celtypes.ListType([to_cel(inner, v) for v in value])
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    return None


@cache
def _environment() -> Any:
    import celpy

    return celpy.Environment()


@cache
def _program(rule: str) -> Any:
    env = _environment()
    return env.program(env.compile(rule))


@dataclass(slots=True)
class CelResult:
    errors: list[FieldError] = field(default_factory=list)
    evaluated: int = 0  # rule evaluations that ran (one rule on three list items: 3)
    transition_skipped: int = 0  # rules reading oldSelf, not run on create


def _type_name(schema: Mapping[str, Any], value: Any) -> str:
    if "type" in schema:
        return str(schema["type"])
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "integer" if isinstance(value, int) else "number"
    )


def _unsupported(error: Exception) -> bool:
    return "undeclared reference" in str(error)


def _run_rule(
    obj: str,
    rule: Mapping[str, Any],
    schema: Mapping[str, Any],
    value: Any,
    path: Path,
    result: CelResult,
) -> None:
    from celpy.celparser import CELParseError
    from celpy.evaluation import CELEvalError

    text = str(rule.get("rule", ""))
    at = f"{path}{rule.get('fieldPath') or ''}"
    shown = _type_name(schema, value)
    if _OLD_SELF.search(text):
        result.transition_skipped += 1
        if rule.get("optionalOldSelf") is True:
            # The server runs these on create too, with oldSelf an empty optional.
            result.errors.append(
                FieldError(
                    obj, at, ErrorType.INVALID, shown,
                    f"CEL rule not evaluated by podserve (optionalOldSelf needs CEL "
                    f"optionals): {text}",
                    CEL_VALIDATION, Severity.WARNING,
                )
            )  # fmt: skip
        return
    message = str(rule.get("message") or "").strip() or f"failed rule: {text}"
    kind = _REASONS.get(str(rule.get("reason", "")), ErrorType.INVALID)
    activation = {"self": to_cel(schema, value)}
    try:
        outcome = _program(text).evaluate(activation)
    except (CELEvalError, CELParseError, TypeError, ValueError, AttributeError) as error:
        # cel-python raises plain Python errors for some operand types where CEL reports
        # `no such overload` (a list rule over a value the schema check already rejects).
        if _unsupported(error) or isinstance(error, CELParseError):
            result.errors.append(
                FieldError(
                    obj,
                    at,
                    ErrorType.INVALID,
                    shown,
                    f"CEL rule not evaluated by podserve ({error.args[0]}): {text}",
                    CEL_VALIDATION,
                    Severity.WARNING,
                )
            )
            return
        result.evaluated += 1
        result.errors.append(
            FieldError(
                obj,
                at,
                kind,
                shown,
                f"{message}: evaluation error: {error.args[0] if error.args else error!r}",
                CEL_VALIDATION,
            )
        )
        return
    result.evaluated += 1
    if bool(outcome):
        return
    expression = rule.get("messageExpression")
    if expression:
        try:
            produced = str(_program(str(expression)).evaluate(activation)).strip()
        except (CELEvalError, CELParseError, TypeError, ValueError, AttributeError):
            produced = ""
        message = produced or message
    result.errors.append(FieldError(obj, at, kind, shown, message, CEL_VALIDATION))


def _walk(obj: str, schema: Mapping[str, Any], value: Any, path: Path, result: CelResult) -> None:
    if value is None:
        return
    for rule in schema.get("x-kubernetes-validations") or []:
        if isinstance(rule, Mapping):
            _run_rule(obj, rule, schema, value, path, result)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, item in value.items():
            sub = _sub(schema, key)
            if sub:
                _walk(obj, sub, item, path.child(key) if key in props else path.key(key), result)
    elif isinstance(value, list):
        inner = _items(schema)
        if inner:
            for i, item in enumerate(value):
                _walk(obj, inner, item, path.index(i), result)


def evaluate_cel(manifest: Manifest, catalog: CrdCatalog) -> CelResult:
    """Every CEL rule of this custom resource's CRD schema against it (none for a kind the
    catalog lacks: the schema check reports that)."""
    result = CelResult()
    schema = catalog.schema_for(manifest)
    if schema is None:
        return result
    _walk(object_label(manifest), schema, apply_defaults(schema, manifest), Path(), result)
    return result


def cel_errors(manifests: list[Manifest], catalog: CrdCatalog) -> Iterator[FieldError]:
    for manifest in manifests:
        yield from evaluate_cel(manifest, catalog).errors
