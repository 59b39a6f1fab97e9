"""The golden set: a JSONL file, one case a line. A case says what to send (an Open Inference
Protocol v2 request, or an OpenAI-compatible body sent as given) and what the answer must
satisfy (a list of checks). docs/eval.md shows examples of each form."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from podserve.core.errors import InvalidInput

Endpoint = Literal["v2", "openai-chat", "openai-completions", "openai-embeddings"]

# The pass ratio over every case is reported under this tag, so a case may not use it.
ALL_TAG = "all"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TensorData(_Model):
    """An explicit OIP input tensor."""

    datatype: str = Field(min_length=1)
    shape: list[int]
    data: list[Any]


class _Check(_Model):
    output: str | None = Field(
        None,
        description="v2: the output tensor to check (may be omitted when the model has one "
        "output). OpenAI: a dotted path into the response body, e.g. "
        "`choices.0.message.content`; default: the generated text, or the first embedding.",
    )


class ExactCheck(_Check):
    kind: Literal["exact"]
    value: Any


class ContainsCheck(_Check):
    kind: Literal["contains"]
    value: str
    case_sensitive: bool = True


class RegexCheck(_Check):
    kind: Literal["regex"]
    pattern: str

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return pattern


class JsonSchemaCheck(_Check):
    kind: Literal["json_schema"]
    json_schema: dict[str, Any] = Field(alias="schema")

    @field_validator("json_schema")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        # A broken schema is the suite's fault: refuse it before any request is sent.
        from podserve.evaluation.checks import check_schema

        check_schema(schema)
        return schema


class NumericCheck(_Check):
    kind: Literal["numeric"]
    value: float | list[Any]
    abs_tol: float = Field(1e-6, ge=0)
    rel_tol: float = Field(0.0, ge=0)


class CosineCheck(_Check):
    kind: Literal["cosine"]
    value: list[float] = Field(min_length=1)
    min: float = Field(ge=-1, le=1)


Check = Annotated[
    ExactCheck | ContainsCheck | RegexCheck | JsonSchemaCheck | NumericCheck | CosineCheck,
    Field(discriminator="kind"),
]


class Case(_Model):
    id: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    endpoint: Endpoint = "v2"
    model: str | None = Field(None, description="v2: the model to call.")
    version: str | None = Field(None, description="v2: a model version.")
    inputs: dict[str, Any] | list[dict[str, Any]] | None = Field(
        None,
        description="v2: {name: {datatype, shape, data}}, {name: one example} (row form: "
        "batch of one, datatype from the model's metadata), or the OIP list form.",
    )
    parameters: dict[str, Any] | None = None
    body: dict[str, Any] | None = Field(None, description="OpenAI: the request body as sent.")
    expect: list[Check] = Field(min_length=1)

    @model_validator(mode="after")
    def _coherent(self) -> Case:
        if self.endpoint == "v2":
            if self.model is None or self.inputs is None:
                raise ValueError("a v2 case needs model and inputs")
            if self.body is not None:
                raise ValueError("a v2 case sends inputs, not a body")
        else:
            if self.body is None:
                raise ValueError(f"an {self.endpoint} case needs a body")
            if self.inputs is not None or self.model is not None:
                raise ValueError(f"an {self.endpoint} case puts model and inputs in its body")
        if ALL_TAG in self.tags:
            raise ValueError(f"tag {ALL_TAG!r} is reserved for the whole suite")
        return self


class Suite(_Model):
    name: str
    cases: tuple[Case, ...]

    def tags(self) -> list[str]:
        return sorted({tag for case in self.cases for tag in case.tags})


def _lines(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            yield number, stripped


def parse_suite(text: str, name: str, source: str = "<suite>") -> Suite:
    """Parse JSONL cases; errors name the file, the line and the field."""
    cases: list[Case] = []
    seen: dict[str, int] = {}
    for number, line in _lines(text):
        where = f"{source}:{number}"
        try:
            raw = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(f"{where}: not JSON: {exc}") from None
        try:
            case = Case.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(case)'}: {err['msg']}"
                for err in exc.errors()
            )
            raise InvalidInput(f"{where}: {problems}") from None
        if case.id in seen:
            raise InvalidInput(f"{where}: case id {case.id!r} repeats line {seen[case.id]}")
        seen[case.id] = number
        cases.append(case)
    if not cases:
        raise InvalidInput(f"{source} holds no cases")
    return Suite(name=name, cases=tuple(cases))
