"""`podserve lint`: each rule fails its failing fixture and passes its passing one; output
formats, exit codes, ignores, stdin and directories; rendered examples lint clean."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from podserve.kube.lint import ALL_RULES, lint_documents, rule_by_id
from podserve.kube.lint.report import rules_markdown
from podserve.kube.types import Severity
from podserve.kube.yamlio import parse_documents, read_paths
from tests.kube.conftest import CliRunner
from tests.kube.paths import EXAMPLES, FIXTURES, REPO_ROOT

LINT = FIXTURES / "lint"
RULE_IDS = [rule.id for rule in ALL_RULES]


def rules_found(path: Path) -> set[str]:
    return {f.rule_id for f in lint_documents(read_paths([str(path)]), ALL_RULES).findings}


def test_every_rule_has_both_fixtures() -> None:
    assert sorted(p.name for p in LINT.iterdir() if p.is_dir()) == sorted(RULE_IDS)
    for rule_id in RULE_IDS:
        assert (LINT / rule_id / "fail.yaml").is_file()
        assert (LINT / rule_id / "pass.yaml").is_file()


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_rule_fails_its_failing_fixture(rule_id: str) -> None:
    assert rule_id in rules_found(LINT / rule_id / "fail.yaml")


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_rule_passes_its_passing_fixture(rule_id: str) -> None:
    assert rule_id not in rules_found(LINT / rule_id / "pass.yaml")


def test_rules_are_documented_fully() -> None:
    assert len(RULE_IDS) == len(set(RULE_IDS)) >= 25
    for rule in ALL_RULES:
        assert rule.title, rule.id
        assert len(rule.why) > 80, rule.id
        assert rule.fix, rule.id
    documented = (REPO_ROOT / "docs" / "lint-rules.md").read_text()
    assert documented == rules_markdown(ALL_RULES), (
        "regenerate: podserve lint --list-rules --format markdown > docs/lint-rules.md"
    )


def test_findings_name_the_object_field_and_line(cli: CliRunner) -> None:
    path = LINT / "gpu-request-not-limit" / "fail.yaml"
    code, out, _ = cli("lint", str(path))
    assert code == 1
    assert (
        f"{path}:1: error[gpu-request-not-limit] Deployment/ml/llm "
        "spec.template.spec.containers[server].resources.requests.nvidia.com/gpu: "
        "nvidia.com/gpu request 1 differs from limit 2"
    ) in out
    assert "    fix: Set the same whole number" in out


def test_line_numbers_point_at_each_document() -> None:
    path = LINT / "hpa-cpu-on-gpu" / "fail.yaml"
    docs = parse_documents(path.read_text(), str(path))
    assert [d.source.line for d in docs] == [1, 14]
    finding = next(
        f for f in lint_documents(docs, ALL_RULES).findings if f.rule_id == "hpa-cpu-on-gpu"
    )
    assert finding.source.line == 14
    assert finding.object == "HorizontalPodAutoscaler/ml/llm"


def test_exit_codes_follow_severity(cli: CliRunner) -> None:
    warn_only = LINT / "no-spread" / "fail.yaml"
    severities = {
        f.severity for f in lint_documents(read_paths([str(warn_only)]), ALL_RULES).findings
    }
    assert Severity.ERROR not in severities
    assert Severity.WARNING in severities
    assert cli("lint", str(warn_only))[0] == 0
    assert cli("lint", "--strict", str(warn_only))[0] == 1
    assert cli("lint", str(LINT / "secret-literal-env" / "fail.yaml"))[0] == 1


def test_ignore_flag_and_annotation(cli: CliRunner, tmp_path: Path) -> None:
    path = LINT / "secret-literal-env" / "fail.yaml"
    code, out, _ = cli(
        "lint", "--ignore", "secret-literal-env", "--ignore", "container-not-hardened", str(path)
    )
    assert code == 0
    assert "[secret-literal-env]" not in out
    annotated = tmp_path / "annotated.yaml"
    annotated.write_text(
        path.read_text().replace(
            "metadata: {name: leaky, namespace: ml}",
            "metadata:\n  name: leaky\n  namespace: ml\n  annotations:\n"
            "    podserve.dev/lint-ignore: secret-literal-env, container-not-hardened",
        )
    )
    code, out, _ = cli("lint", str(annotated))
    assert code == 0
    assert "[secret-literal-env]" not in out
    assert cli("lint", "--ignore", "no-such-rule", str(path))[0] == 2


def test_json_and_sarif(cli: CliRunner) -> None:
    path = LINT / "keda-average-query" / "fail.yaml"
    code, out, _ = cli("lint", "--format", "json", str(path))
    payload = json.loads(out)
    assert code == 1
    assert payload["summary"]["errors"] == 1
    assert payload["findings"][0]["field"] == "spec.triggers[0].metadata.query"
    code, out, _ = cli("lint", "--format", "sarif", str(path))
    sarif = json.loads(out)
    run = sarif["runs"][0]
    assert sarif["version"] == "2.1.0"
    assert code == 1
    result = run["results"][0]
    assert result["ruleId"] == "keda-average-query"
    assert result["level"] == "error"
    assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == "keda-average-query"
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == str(path)
    assert location["region"]["startLine"] == 2


def test_stdin_and_directories(cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (LINT / "image-latest" / "fail.yaml").read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    code, out, _ = cli("lint", "-")
    assert "-:1: warning[image-latest]" in out
    assert code == 0
    code, out, _ = cli("lint", "--format", "json", str(LINT))
    files = {f["file"] for f in json.loads(out)["findings"]}
    assert code == 1
    assert len(files) > len(RULE_IDS)


def test_kserve_inference_service(tmp_path: Path) -> None:
    isvc = tmp_path / "isvc.yaml"
    isvc.write_text("""
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: llama
  namespace: ml
  annotations: {serving.kserve.io/deploymentMode: RawDeployment}
spec:
  predictor:
    minReplicas: 2
    model:
      modelFormat: {name: huggingface}
      storageUri: hf://meta-llama/Meta-Llama-3-8B-Instruct
      resources:
        requests: {nvidia.com/gpu: "1", memory: 24Gi}
        limits: {nvidia.com/gpu: "2", memory: 32Gi}
      env: [{name: HF_TOKEN, value: hf_abcdefghijklmnopqrstuvwxyz0123}]
""")
    found = rules_found(isvc)
    assert {
        "gpu-request-not-limit",
        "gpu-memory-request-not-limit",
        "gpu-no-toleration",
        "hpa-cpu-on-gpu",
        "model-not-pinned",
        "secret-literal-env",
        "no-shm-volume",
        "no-spread",
    } <= found
    # the ServingRuntime supplies probes and lifecycle: not this object's fault
    assert not found & {"no-readiness-probe", "no-prestop-delay", "container-not-hardened"}


def test_rendered_examples_lint_clean(cli: CliRunner, tmp_path: Path) -> None:
    for example in EXAMPLES:
        out_dir = tmp_path / example.stem
        assert cli("render", str(example), "-o", str(out_dir))[0] == 0
        code, out, _ = cli("lint", "--strict", str(out_dir))
        assert code == 0, out
        assert "0 error(s), 0 warning(s), 0 info" in out


def test_list_rules(cli: CliRunner) -> None:
    code, out, _ = cli("lint", "--list-rules")
    assert code == 0
    assert all(rule_id in out for rule_id in RULE_IDS)
    assert rule_by_id("no-pdb") is not None
    assert rule_by_id("nope") is None
