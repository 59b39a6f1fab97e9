"""The `eval` section: a CronJob running `podserve eval` against the Service, the suite
ConfigMap, and the PrometheusRule; they validate and lint clean like every rendered object."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from podserve.config.model_service import ModelService, load_model_service
from podserve.core.errors import InvalidInput
from podserve.evaluation.suite import parse_suite
from podserve.kube.render import render
from podserve.kube.types import Manifest
from podserve.kube.validation import CrdCatalog, validate_manifests
from podserve.kube.yamlio import dump_all
from tests.kube.conftest import CliRunner
from tests.kube.helpers import find, kinds, with_spec
from tests.kube.paths import EXAMPLES, load_example

CPU = next(p for p in EXAMPLES if p.name == "sklearn-cpu-hpa.yaml")


def eval_objects(service: ModelService) -> list[Manifest]:
    return [
        m
        for m in render(service).manifests
        if m["metadata"]["labels"].get("app.kubernetes.io/component") == "eval"
    ]


def container(cron_job: Manifest) -> dict[str, Any]:
    pod = cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    result: dict[str, Any] = pod["containers"][0]
    return result


def test_example_renders_suite_cron_job_and_rule() -> None:
    service = load_example(CPU)
    objects = eval_objects(service)
    assert kinds(objects) == ["ConfigMap", "CronJob", "PrometheusRule"]
    suite_text = find(objects, "ConfigMap", "fraud-score-eval-suite")["data"]["suite.jsonl"]
    assert len(parse_suite(suite_text, "fraud").cases) == 2  # the example's suite is valid
    cron = find(objects, "CronJob", "fraud-score-eval")
    assert cron["spec"]["schedule"] == "17 * * * *"
    assert cron["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 0
    args = container(cron)["args"]
    assert args[:6] == [
        "eval",
        "/etc/podserve/eval/suite/suite.jsonl",
        "--url",
        "http://fraud-score.risk.svc:8000",
        "--suite",
        "risk.fraud-score",
    ]
    assert args[args.index("--baseline") + 1] == "/etc/podserve/eval/baseline/baseline.json"
    assert args[args.index("--pushgateway") + 1].startswith("http://prometheus-pushgateway")
    assert args[args.index("--min-pass-ratio") + 1] == "0.95"
    rule = find(objects, "PrometheusRule", "fraud-score-eval")
    alerts = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    assert alerts["PodserveEvalRegression"]["expr"] == (
        'min(podserve_eval_pass_ratio{suite="risk.fraud-score",tag="all"}) < 0.95'
    )
    assert "podserve_eval_last_run_timestamp_seconds" in alerts["PodserveEvalStale"]["expr"]
    assert "> 10800" in alerts["PodserveEvalStale"]["expr"]


VARIANT = {
    "schedule": "*/30 * * * *",
    "suiteConfigMap": "shared-golden",
    "suiteName": "fraud",
    "textfileDir": "/var/lib/node_exporter/textfile",
    "minPassRatio": 0.8,
}


def test_config_map_suite_and_textfile_variant_validates(crd_catalog: CrdCatalog) -> None:
    service = with_spec(load_example(CPU), eval=VARIANT)
    objects = eval_objects(service)
    assert kinds(objects) == ["CronJob", "PrometheusRule"]  # the suite ConfigMap is the user's
    cron = find(objects, "CronJob")
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["suite"]["configMap"]["name"] == "shared-golden"
    assert volumes["textfile"]["hostPath"]["path"] == "/var/lib/node_exporter/textfile"
    args = container(cron)["args"]
    assert "--baseline" not in args
    assert "--pushgateway" not in args
    assert args[args.index("--textfile") + 1].endswith("/podserve_eval_fraud-score.prom")
    assert (
        'suite="fraud"' in find(objects, "PrometheusRule")["spec"]["groups"][0]["rules"][0]["expr"]
    )
    assert validate_manifests(render(service).manifests, crd_catalog) == []
    no_alerts = with_spec(service, eval={**VARIANT, "alerts": False, "textfileDir": None})
    assert kinds(eval_objects(no_alerts)) == ["CronJob"]


def test_variant_lints_clean(tmp_path: Path, cli: CliRunner) -> None:
    service = with_spec(load_example(CPU), eval=VARIANT)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(service.to_document()))
    code, out, _ = cli("render", str(spec_path))
    assert code == 0
    assert out == dump_all(render(service).manifests)
    (tmp_path / "out.yaml").write_text(out)
    code, out, _ = cli("lint", "--strict", str(tmp_path / "out.yaml"))
    assert code == 0, out


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"pushgateway": "http://pg:9091"}, "suite \\(inline\\) or suiteConfigMap"),
        (
            {"suite": "{}", "suiteConfigMap": "x", "pushgateway": "http://pg:9091"},
            "exactly one",
        ),
        ({"suite": "{}"}, "eval alerts need the metrics exported"),
        ({"suite": "{}", "pushgateway": "pg:9091"}, "pushgateway"),
        ({"suite": "{}", "alerts": False, "minPassRatio": 1.5}, "minPassRatio"),
    ],
)
def test_incoherent_eval_sections_are_refused(section: dict[str, Any], message: str) -> None:
    document = load_example(CPU).to_document()
    document["spec"]["eval"] = section
    with pytest.raises(InvalidInput, match=message):
        load_model_service(yaml.safe_dump(document), "spec.yaml")
