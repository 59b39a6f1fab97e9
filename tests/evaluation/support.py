"""Builders for results and suites in the evaluation tests."""

from __future__ import annotations

from podserve.evaluation.results import CaseResult, RunResult


def result(*cases: tuple[str, tuple[str, ...], bool], suite: str = "s") -> RunResult:
    """A run from (id, tags, passed) triples."""
    return RunResult(
        suite=suite,
        url="http://test",
        started_at_s=1_700_000_000.0,
        duration_s=0.5,
        cases=tuple(
            CaseResult(case_id, tags, passed, () if passed else ("boom",))
            for case_id, tags, passed in cases
        ),
    )
