"""The gates of a run: failing cases fail it by default; --min-pass-ratio or a baseline
decide instead when given."""

from __future__ import annotations

import pytest

from podserve.evaluation import CaseResult, RunResult, compare, gate


def run(*passed: bool) -> RunResult:
    cases = tuple(CaseResult(id=f"c{i}", tags=("t",), passed=ok) for i, ok in enumerate(passed))
    return RunResult(suite="s", url="u", started_at_s=0.0, duration_s=0.1, cases=cases)


def test_without_gates_every_case_must_pass() -> None:
    assert gate(run(True, True), None, min_pass_ratio=None).passed
    verdict = gate(run(False, False, False, False, False), None, min_pass_ratio=None)
    assert not verdict.passed
    (problem,) = verdict.problems
    assert problem.startswith("5 of 5 case(s) failed (c0, c1, c2, c3, c4)")
    assert "--min-pass-ratio 0" in problem


def test_a_long_list_of_failures_is_shortened() -> None:
    (problem,) = gate(run(*[False] * 25), None, min_pass_ratio=None).problems
    assert "c9 and 15 more" in problem
    assert "c10" not in problem


@pytest.mark.parametrize(
    ("minimum", "passed"), [(0.0, True), (0.5, True), (0.75, False), (1.0, False)]
)
def test_min_pass_ratio_replaces_the_default(minimum: float, passed: bool) -> None:
    verdict = gate(run(True, False, True, False), None, min_pass_ratio=minimum)
    assert verdict.passed is passed
    if not passed:
        assert verdict.problems == (f"pass ratio 50.0% is below --min-pass-ratio {minimum:.1%}",)


def test_a_baseline_replaces_the_default() -> None:
    baseline = run(True, False, True, False)
    same = compare(run(True, False, True, False), baseline, max_drop=0.05)
    assert gate(run(True, False, True, False), same, min_pass_ratio=None).passed
    worse_run = run(False, False, True, False)
    worse = compare(worse_run, baseline, max_drop=0.05)
    verdict = gate(worse_run, worse, min_pass_ratio=None, baseline_name="b.json")
    assert verdict.problems == ("regression against b.json",)
    both = gate(worse_run, worse, min_pass_ratio=0.5, baseline_name="b.json")
    assert len(both.problems) == 2
