"""Whether a run passes: the gates `podserve eval` applies, in one pure function.

A run that nobody told what "good enough" is must not pass with failing cases: a CronJob
watching a deployed model would otherwise report success while every case fails. So:

* `--min-pass-ratio F` given: the overall pass ratio must be at least `F` (`0` reports
  without gating);
* `--baseline` given: no regression against it (see baseline.py);
* neither given: every case must pass (an implicit minimum pass ratio of 1).
"""

from __future__ import annotations

from dataclasses import dataclass

from podserve.evaluation.baseline import Comparison
from podserve.evaluation.results import RunResult


@dataclass(frozen=True, slots=True)
class GateResult:
    problems: tuple[str, ...]  # empty: the run passes

    @property
    def passed(self) -> bool:
        return not self.problems


def gate(
    result: RunResult,
    comparison: Comparison | None,
    *,
    min_pass_ratio: float | None,
    baseline_name: str = "the baseline",
) -> GateResult:
    problems: list[str] = []
    if min_pass_ratio is not None and result.pass_ratio < min_pass_ratio:
        problems.append(
            f"pass ratio {result.pass_ratio:.1%} is below --min-pass-ratio {min_pass_ratio:.1%}"
        )
    if comparison is not None and comparison.regressed:
        problems.append(f"regression against {baseline_name}")
    if min_pass_ratio is None and comparison is None:
        failed = [case.id for case in result.cases if not case.passed]
        if failed:
            shown = ", ".join(failed[:10]) + (
                f" and {len(failed) - 10} more" if len(failed) > 10 else ""
            )
            problems.append(
                f"{len(failed)} of {len(result.cases)} case(s) failed ({shown}); without "
                "--baseline or --min-pass-ratio every case must pass (--min-pass-ratio 0 "
                "reports without failing)"
            )
    return GateResult(tuple(problems))
