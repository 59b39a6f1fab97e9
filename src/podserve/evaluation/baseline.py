"""A stored run as the baseline, and the comparison that decides a regression: a pass ratio
(overall or of a tag) that fell by more than `max_drop`, or, with `strict_cases`, any case
that passed in the baseline and fails now."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import orjson

from podserve.core.errors import InvalidInput
from podserve.evaluation.results import RunResult

# Ratios are fractions of small counts; this keeps 0.9 - 0.85 from counting as > 0.05.
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class RatioDrop:
    tag: str
    baseline: float
    current: float

    def __str__(self) -> str:
        return (
            f"pass ratio of {'the suite' if self.tag == 'all' else f'tag {self.tag}'} fell "
            f"from {self.baseline:.1%} to {self.current:.1%}"
        )


@dataclass(frozen=True, slots=True)
class Comparison:
    max_drop: float
    strict_cases: bool
    drops: tuple[RatioDrop, ...]  # beyond max_drop
    newly_failing: tuple[str, ...]  # passed in the baseline, fail now
    newly_passing: tuple[str, ...]
    missing: tuple[str, ...]  # in the baseline, not in this suite
    baseline_ratios: dict[str, float]

    @property
    def regressed(self) -> bool:
        return bool(self.drops) or (self.strict_cases and bool(self.newly_failing))

    def reasons(self) -> list[str]:
        out = [f"{drop} (more than the allowed {self.max_drop:.1%})" for drop in self.drops]
        if self.strict_cases and self.newly_failing:
            out.append(f"{len(self.newly_failing)} case(s) passed in the baseline and fail now")
        return out


def compare(
    current: RunResult, baseline: RunResult, *, max_drop: float, strict_cases: bool = False
) -> Comparison:
    if not 0 <= max_drop <= 1:
        raise ValueError("max_drop is a fraction between 0 and 1")
    before = {tag: ratio.value for tag, ratio in baseline.ratios().items()}
    now = current.ratios()
    drops = tuple(
        RatioDrop(tag, before[tag], ratio.value)
        for tag, ratio in now.items()
        # A tag new since the baseline has nothing to fall from.
        if tag in before and before[tag] - ratio.value > max_drop + _EPSILON
    )
    old_cases, new_cases = baseline.by_id(), current.by_id()
    return Comparison(
        max_drop=max_drop,
        strict_cases=strict_cases,
        drops=drops,
        newly_failing=tuple(
            case_id
            for case_id, case in new_cases.items()
            if not case.passed and case_id in old_cases and old_cases[case_id].passed
        ),
        newly_passing=tuple(
            case_id
            for case_id, case in new_cases.items()
            if case.passed and case_id in old_cases and not old_cases[case_id].passed
        ),
        missing=tuple(case_id for case_id in old_cases if case_id not in new_cases),
        baseline_ratios=before,
    )


def save_baseline(result: RunResult, path: Path) -> None:
    """Write atomically: a reader (or a crash) never sees half a baseline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2) + b"\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_baseline(path: Path) -> RunResult:
    try:
        document = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise InvalidInput(f"cannot read baseline {path}: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"baseline {path} is not JSON: {exc}") from None
    return RunResult.from_dict(document, str(path))
