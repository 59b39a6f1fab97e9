"""Every example, rendered, is seen by `nonprod-gpu-always-on` for what it is: the office-
hours dev example as non-production (so the rule would fire without its window), the
others as production (so the rule stays silent whatever their schedule)."""

from __future__ import annotations

from typing import Any

import pytest

from podserve.kube.lint import ALL_RULES, lint_documents
from podserve.kube.render import render
from podserve.kube.yamlio import dump_all, parse_documents
from tests.kube.paths import EXAMPLES, load_example

NON_PRODUCTION = {"dev-gpu-office-hours"}
RULE = "nonprod-gpu-always-on"


def _without_windows(manifest: dict[str, Any]) -> dict[str, Any]:
    """The ScaledObject as if the spec had no activeHours: cron triggers gone."""
    if manifest["kind"] != "ScaledObject":
        return manifest
    triggers = [t for t in manifest["spec"]["triggers"] if t["type"] != "cron"]
    return manifest | {"spec": manifest["spec"] | {"triggers": triggers}}


def _messages(manifests: list[dict[str, Any]]) -> list[str]:
    documents = parse_documents(dump_all(manifests), "rendered.yaml")
    return [f.message for f in lint_documents(documents, ALL_RULES).findings if f.rule_id == RULE]


def test_one_example_is_non_production() -> None:
    assert {p.stem for p in EXAMPLES} >= NON_PRODUCTION


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_examples_are_seen_as_what_they_are(example: Any) -> None:
    manifests = [dict(m) for m in render(load_example(example)).manifests]
    assert _messages(manifests) == []  # as shipped: clean
    stripped = _messages([_without_windows(m) for m in manifests])
    if example.stem in NON_PRODUCTION:
        assert stripped == [
            "non-production GPU service (label environment=dev) holds its GPUs around the "
            "clock: no active-hours window"
        ]
    else:
        assert stripped == []
