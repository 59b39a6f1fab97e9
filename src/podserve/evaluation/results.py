"""What a run produced: one `CaseResult` per case and the pass ratios derived from them.
The JSON form (`to_dict`) is both the `--format json` report and the stored baseline."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from podserve.core.errors import InvalidInput
from podserve.evaluation.suite import ALL_TAG

FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class CaseResult:
    id: str
    tags: tuple[str, ...]
    passed: bool
    reasons: tuple[str, ...] = ()
    status: int | None = None  # HTTP status; None when no response came
    latency_ms: float = 0.0
    reachable: bool = True  # False: the connection itself failed


@dataclass(frozen=True, slots=True)
class Ratio:
    passed: int
    total: int

    @property
    def value(self) -> float:
        return self.passed / self.total if self.total else 0.0


@dataclass(frozen=True, slots=True)
class RunResult:
    suite: str
    url: str
    started_at_s: float  # wall clock (Unix seconds): the metric's timestamp
    duration_s: float
    cases: tuple[CaseResult, ...]

    @property
    def pass_ratio(self) -> float:
        return self.ratios()[ALL_TAG].value

    @property
    def reachable(self) -> bool:
        """At least one request reached the endpoint."""
        return any(case.reachable for case in self.cases)

    def ratios(self) -> dict[str, Ratio]:
        """Pass ratio over every case (tag `all`) and per tag, tags sorted."""
        counts: dict[str, list[int]] = {ALL_TAG: [0, 0]}
        for case in self.cases:
            for tag in (ALL_TAG, *case.tags):
                entry = counts.setdefault(tag, [0, 0])
                entry[0] += case.passed
                entry[1] += 1
        ordered = [ALL_TAG, *sorted(t for t in counts if t != ALL_TAG)]
        return {tag: Ratio(*counts[tag]) for tag in ordered}

    def by_id(self) -> dict[str, CaseResult]:
        return {case.id: case for case in self.cases}

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "suite": self.suite,
            "url": self.url,
            "started_at_s": self.started_at_s,
            "duration_s": round(self.duration_s, 6),
            "pass_ratio": self.pass_ratio,
            "ratios": {
                tag: {"passed": r.passed, "total": r.total, "ratio": r.value}
                for tag, r in self.ratios().items()
            },
            "cases": [
                {
                    "id": c.id,
                    "tags": list(c.tags),
                    "passed": c.passed,
                    "reasons": list(c.reasons),
                    "status": c.status,
                    "latency_ms": round(c.latency_ms, 3),
                    "reachable": c.reachable,
                }
                for c in self.cases
            ],
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any], source: str = "<result>") -> RunResult:
        if not isinstance(document, Mapping) or document.get("format") != FORMAT_VERSION:
            raise InvalidInput(f"{source} is not a podserve eval result (format {FORMAT_VERSION})")
        try:
            cases = tuple(
                CaseResult(
                    id=str(c["id"]),
                    tags=tuple(str(t) for t in c.get("tags", ())),
                    passed=bool(c["passed"]),
                    reasons=tuple(str(r) for r in c.get("reasons", ())),
                    status=c.get("status"),
                    latency_ms=float(c.get("latency_ms", 0.0)),
                    reachable=bool(c.get("reachable", True)),
                )
                for c in document["cases"]
            )
            return cls(
                suite=str(document["suite"]),
                url=str(document.get("url", "")),
                started_at_s=float(document.get("started_at_s", 0.0)),
                duration_s=float(document.get("duration_s", 0.0)),
                cases=cases,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(f"{source}: malformed eval result: {exc!r}") from None
