"""What to send: the target address, and request payloads encoded once before the run.

Three sources of payloads: random tensors for an Open Inference Protocol v2 model,
random prompts (lengths drawn from a distribution) for an OpenAI-compatible endpoint,
and bodies read from a file. Each yields `PreparedRequest`s whose bytes go on the wire
as they are, so encoding costs nothing during the measurement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol
from urllib.parse import urlsplit

import numpy as np
import orjson

from podserve.bench.wire import encode_request
from podserve.config.model_config import load_model_config
from podserve.core.tensors import Datatype

OpenAIApi = Literal["chat", "completions"]

# A small vocabulary of common English words: most tokenizers map each to one token,
# so a prompt of N words is close to N tokens.
_VOCABULARY = (
    "the of and to in is was for on are with as by at be this have from or one had not "
    "but what all were when we there can an your which their said if do will each about "
    "how up out them then she many some so these would other into has more her two like "
    "him see time could no make than first been its who now people my made over did down "
    "only way find use may water long little very after words called just where most know"
)


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http":
            raise ValueError(f"{url!r}: only http:// targets are supported (TLS is not measured)")
        if not parts.hostname:
            raise ValueError(f"{url!r} has no host")
        return cls(parts.hostname, parts.port or 80)

    @property
    def authority(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    raw: bytes
    stream: bool = False


class Workload(Protocol):
    def describe(self) -> str: ...

    def prepare(self, target: Target, headers: Mapping[str, str]) -> list[PreparedRequest]: ...


@dataclass(frozen=True, slots=True)
class TensorInput:
    name: str
    shape: tuple[int, ...]
    datatype: Datatype

    @classmethod
    def parse(cls, text: str) -> TensorInput:
        """`NAME:SHAPE:DATATYPE`, e.g. `input-0:1x4:FP32` (-1 in a shape means 1)."""
        parts = text.split(":")
        if len(parts) != 3:
            raise ValueError(f"--input {text!r} must look like NAME:1x4:FP32")
        name, shape_text, dtype_text = parts
        try:
            shape = tuple(int(d) for d in shape_text.lower().split("x"))
        except ValueError:
            raise ValueError(f"--input {text!r}: shape must be like 1x4") from None
        return cls(name, shape, Datatype.parse(dtype_text.upper()))

    @property
    def concrete_shape(self) -> tuple[int, ...]:
        return tuple(1 if d < 0 else d for d in self.shape)


def inputs_from_model_dir(directory: Path) -> tuple[str, tuple[TensorInput, ...]]:
    """The model's name and declared inputs, from its `model.yaml`."""
    config = load_model_config(directory)
    inputs = tuple(TensorInput(t.name, tuple(t.shape), t.datatype) for t in config.inputs)
    return config.name, inputs


def _random_tensor(spec: TensorInput, rng: np.random.Generator) -> list[object]:
    shape = spec.concrete_shape
    dtype = spec.datatype
    values: np.ndarray[tuple[int, ...], np.dtype[np.generic]]
    if dtype is Datatype.BYTES:
        n = math.prod(shape)
        return ["".join(rng.choice(list("abcdefghij"), size=8)) for _ in range(n)]
    if dtype is Datatype.BOOL:
        values = rng.integers(0, 2, size=shape).astype(bool)
    elif dtype.value.startswith("FP"):
        values = rng.random(size=shape).astype(np.float32).round(6)
    else:
        values = rng.integers(0, 100, size=shape)
    flat: list[object] = list(values.reshape(-1).tolist())
    return flat


@dataclass(frozen=True, slots=True)
class OipWorkload:
    """Random tensors for `POST /v2/models/{model}/infer`."""

    model: str
    inputs: tuple[TensorInput, ...]
    variants: int = 64
    seed: int = 0

    def describe(self) -> str:
        shapes = ", ".join(
            f"{t.name} {'x'.join(map(str, t.concrete_shape))} {t.datatype}" for t in self.inputs
        )
        return f"OIP v2 infer on {self.model!r} ({shapes})"

    def bodies(self) -> list[bytes]:
        if not self.inputs:
            raise ValueError("an OIP workload needs at least one input (--input or --model-dir)")
        rng = np.random.default_rng(self.seed)
        return [
            orjson.dumps(
                {
                    "inputs": [
                        {
                            "name": t.name,
                            "shape": list(t.concrete_shape),
                            "datatype": t.datatype.value,
                            "data": _random_tensor(t, rng),
                        }
                        for t in self.inputs
                    ]
                }
            )
            for _ in range(max(1, self.variants))
        ]

    def prepare(self, target: Target, headers: Mapping[str, str]) -> list[PreparedRequest]:
        path = f"/v2/models/{self.model}/infer"
        return [
            PreparedRequest(encode_request("POST", target.authority, path, body, headers))
            for body in self.bodies()
        ]


@dataclass(frozen=True, slots=True)
class LengthDistribution:
    """Token counts: `128` (fixed), `64..256` (uniform) or `lognormal:128:0.5`
    (median 128, sigma 0.5 of the underlying normal)."""

    kind: Literal["fixed", "uniform", "lognormal"]
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, text: str) -> LengthDistribution:
        try:
            if text.startswith("lognormal:"):
                _, median, sigma = text.split(":")
                return cls("lognormal", float(median), float(sigma))
            if ".." in text:
                low, high = text.split("..")
                if int(low) > int(high):
                    raise ValueError
                return cls("uniform", int(low), int(high))
            return cls("fixed", int(text))
        except ValueError:
            raise ValueError(
                f"length {text!r} must be N, LOW..HIGH or lognormal:MEDIAN:SIGMA"
            ) from None

    def sample(self, rng: np.random.Generator, size: int) -> list[int]:
        if self.kind == "fixed":
            values = np.full(size, self.a)
        elif self.kind == "uniform":
            values = rng.integers(int(self.a), int(self.b) + 1, size=size)
        else:
            values = rng.lognormal(math.log(self.a), self.b, size=size)
        result: list[int] = np.maximum(1, np.rint(values)).astype(int).tolist()
        return result

    def __str__(self) -> str:
        if self.kind == "fixed":
            return str(int(self.a))
        if self.kind == "uniform":
            return f"{int(self.a)}..{int(self.b)}"
        return f"lognormal:{self.a:g}:{self.b:g}"


@dataclass(frozen=True, slots=True)
class OpenAIWorkload:
    """Random prompts for `/v1/chat/completions` or `/v1/completions`."""

    model: str
    api: OpenAIApi = "chat"
    prompt_tokens: LengthDistribution = field(
        default_factory=lambda: LengthDistribution("fixed", 128)
    )
    max_tokens: LengthDistribution = field(default_factory=lambda: LengthDistribution("fixed", 64))
    stream: bool = True
    ignore_eos: bool = False
    variants: int = 64
    seed: int = 0

    def describe(self) -> str:
        mode = "streaming" if self.stream else "non-streaming"
        return (
            f"OpenAI {self.api} on {self.model!r}, {mode}, prompt tokens {self.prompt_tokens}, "
            f"max_tokens {self.max_tokens}"
        )

    def bodies(self) -> list[bytes]:
        rng = np.random.default_rng(self.seed)
        n = max(1, self.variants)
        words = _VOCABULARY.split()
        prompts = self.prompt_tokens.sample(rng, n)
        outputs = self.max_tokens.sample(rng, n)
        bodies = []
        for prompt_len, max_tokens in zip(prompts, outputs, strict=True):
            text = " ".join(rng.choice(words, size=prompt_len).tolist())
            body: dict[str, object] = {"model": self.model, "max_tokens": max_tokens}
            if self.api == "chat":
                body["messages"] = [{"role": "user", "content": text}]
            else:
                body["prompt"] = text
            if self.stream:
                body["stream"] = True
                body["stream_options"] = {"include_usage": True}
            if self.ignore_eos:
                body["ignore_eos"] = True
            bodies.append(orjson.dumps(body))
        return bodies

    def prepare(self, target: Target, headers: Mapping[str, str]) -> list[PreparedRequest]:
        path = "/v1/chat/completions" if self.api == "chat" else "/v1/completions"
        all_headers = dict(headers)
        if self.stream:
            all_headers.setdefault("Accept", "text/event-stream")
        return [
            PreparedRequest(
                encode_request("POST", target.authority, path, body, all_headers), self.stream
            )
            for body in self.bodies()
        ]


@dataclass(frozen=True, slots=True)
class FileWorkload:
    """Bodies from a file: `.jsonl` (one JSON body a line) or `.json` (one body or a list)."""

    path: Path
    url_path: str
    stream: bool = False

    def describe(self) -> str:
        return f"bodies from {self.path} to {self.url_path}"

    def bodies(self) -> list[bytes]:
        text = self.path.read_bytes()
        if self.path.suffix == ".jsonl":
            items: Sequence[object] = [
                orjson.loads(line) for line in text.splitlines() if line.strip()
            ]
        else:
            loaded = orjson.loads(text)
            items = loaded if isinstance(loaded, list) else [loaded]
        if not items:
            raise ValueError(f"{self.path} holds no request bodies")
        return [orjson.dumps(item) for item in items]

    def prepare(self, target: Target, headers: Mapping[str, str]) -> list[PreparedRequest]:
        all_headers = dict(headers)
        if self.stream:
            all_headers.setdefault("Accept", "text/event-stream")
        return [
            PreparedRequest(
                encode_request("POST", target.authority, self.url_path, body, all_headers),
                self.stream,
            )
            for body in self.bodies()
        ]
