"""Pass ratios, baseline storage and the regression rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from podserve.core.errors import InvalidInput
from podserve.evaluation.baseline import compare, load_baseline, save_baseline
from podserve.evaluation.results import RunResult
from tests.evaluation.support import result

BASE = result(
    ("a1", ("a",), True),
    ("a2", ("a",), True),
    ("b1", ("b",), True),
    ("b2", ("b",), False),
    *((f"c{i}", ("c",), True) for i in range(16)),
)


def test_ratios_per_tag_and_overall() -> None:
    ratios = BASE.ratios()
    assert list(ratios) == ["all", "a", "b", "c"]
    assert (ratios["all"].passed, ratios["all"].total) == (19, 20)
    assert ratios["b"].value == 0.5
    assert BASE.pass_ratio == 0.95


def test_identical_run_is_no_regression() -> None:
    comparison = compare(BASE, BASE, max_drop=0.0, strict_cases=True)
    assert not comparison.regressed
    assert comparison.reasons() == []
    assert comparison.baseline_ratios["all"] == 0.95


def test_tag_drop_beyond_max_drop_regresses_even_when_overall_is_within() -> None:
    # One of 20 cases flips: overall 95% -> 90% (a drop of 0.05, allowed), tag a 100% -> 50%.
    now = result(*((c.id, c.tags, c.passed and c.id != "a1") for c in BASE.cases))
    comparison = compare(now, BASE, max_drop=0.05)
    assert comparison.regressed
    assert [d.tag for d in comparison.drops] == ["a"]
    assert comparison.reasons() == [
        "pass ratio of tag a fell from 100.0% to 50.0% (more than the allowed 5.0%)"
    ]
    assert comparison.newly_failing == ("a1",)
    # A drop of exactly max_drop is allowed (floating point must not make 0.95-0.9 > 0.05).
    assert not compare(now, BASE, max_drop=0.5).regressed


def test_overall_drop_is_named_the_suite() -> None:
    now = result(("a1", (), False), ("a2", (), True))
    before = result(("a1", (), True), ("a2", (), True))
    comparison = compare(now, before, max_drop=0.1)
    assert comparison.reasons()[0].startswith("pass ratio of the suite fell from 100.0% to 50.0%")


def test_strict_cases_catches_a_swap_that_keeps_the_ratio() -> None:
    before = result(("x", (), True), ("y", (), False))
    now = result(("x", (), False), ("y", (), True))
    assert not compare(now, before, max_drop=0.0).regressed
    strict = compare(now, before, max_drop=0.0, strict_cases=True)
    assert strict.regressed
    assert strict.newly_failing == ("x",)
    assert strict.newly_passing == ("y",)
    assert strict.reasons() == ["1 case(s) passed in the baseline and fail now"]


def test_new_tags_and_removed_cases_are_not_regressions() -> None:
    before = result(("old", ("gone",), True), ("kept", (), True))
    now = result(("kept", (), True), ("new", ("fresh",), False))
    comparison = compare(now, before, max_drop=0.6)
    assert comparison.missing == ("old",)
    assert "fresh" not in {d.tag for d in comparison.drops}
    assert not comparison.regressed


def test_max_drop_must_be_a_fraction() -> None:
    with pytest.raises(ValueError, match="fraction"):
        compare(BASE, BASE, max_drop=5)


def test_baseline_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "baseline.json"
    save_baseline(BASE, path)
    assert load_baseline(path) == BASE
    assert [p.name for p in path.parent.iterdir()] == ["baseline.json"]  # no temp file left


def test_bad_baselines_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read baseline"):
        load_baseline(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text("[1, 2")
    with pytest.raises(InvalidInput, match="is not JSON"):
        load_baseline(tmp_path / "x.json")
    (tmp_path / "y.json").write_text('{"format": 1, "suite": "s"}')
    with pytest.raises(InvalidInput, match="malformed eval result"):
        load_baseline(tmp_path / "y.json")
    (tmp_path / "z.json").write_text('{"cases": []}')
    with pytest.raises(InvalidInput, match="not a podserve eval result"):
        RunResult.from_dict({"cases": []}, "z.json")
