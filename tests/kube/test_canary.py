"""`podserve canary`: weights move in rendered output, route files and specs, and the spec
stored beside rendered output keeps agreeing with the route."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from podserve.config.model_service import ModelService
from podserve.core.errors import InvalidInput
from podserve.kube import conventions as c
from podserve.kube.canary import set_percent
from podserve.kube.render import render
from podserve.kube.yamlio import dump_all
from tests.kube.conftest import CliRunner
from tests.kube.paths import EXAMPLES, load_example

LLM = next(p for p in EXAMPLES if p.name == "llm-gpu-keda-canary.yaml")


def weights(manifests: list[dict[str, Any]]) -> list[tuple[str, int]]:
    route = next(m for m in manifests if m["kind"] == "HTTPRoute")
    refs = route["spec"]["rules"][0]["backendRefs"]
    return [(r["name"], r["weight"]) for r in refs]


@pytest.mark.parametrize(
    ("action", "extra", "expected"),
    [
        ("promote", [], [("llama", 0), ("llama-canary", 100)]),
        ("rollback", [], [("llama", 100), ("llama-canary", 0)]),
        ("set", ["--percent", "25"], [("llama", 75), ("llama-canary", 25)]),
    ],
)
def test_rendered_output(
    cli: CliRunner, tmp_path: Path, action: str, extra: list[str], expected: list[tuple[str, int]]
) -> None:
    rendered = tmp_path / "out.yaml"
    rendered.write_text(cli("render", str(LLM))[1])
    code, out, err = cli("canary", action, str(rendered), *extra)
    assert code == 0
    assert "HTTPRoute/llama: canary 10% ->" in err
    manifests = list(yaml.safe_load_all(out))
    assert weights(manifests) == expected
    # the stored spec follows, so rendering it again gives the rewritten output
    stored = next(m for m in manifests if m["kind"] == "ConfigMap" and c.SPEC_FILE in m["data"])
    again = ModelService.model_validate(yaml.safe_load(stored["data"][c.SPEC_FILE]))
    assert dump_all(render(again).manifests) == out


def test_in_place_on_a_route_file(cli: CliRunner, tmp_path: Path) -> None:
    route = tmp_path / "route.yaml"
    route.write_text("""apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: chat, namespace: llm}
spec:
  rules:
    - backendRefs:
        - {name: chat, port: 8000, weight: 3}
        - {name: chat-canary, port: 8000, weight: 1}
""")
    code, out, err = cli("canary", "set", "--percent", "50", "-i", str(route))
    assert code == 0
    assert out == ""
    assert "canary 25% -> 50%" in err
    assert weights(list(yaml.safe_load_all(route.read_text()))) == [
        ("chat", 50),
        ("chat-canary", 50),
    ]


def test_spec_file_from_stdin(cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(LLM.read_text()))
    code, out, _ = cli("canary", "promote", "-")
    assert code == 0
    assert yaml.safe_load(out)["spec"]["canary"]["percent"] == 100


def test_refusals(cli: CliRunner, tmp_path: Path) -> None:
    assert cli("canary", "set", str(LLM))[0] == 2  # no --percent
    assert cli("canary", "promote", "--percent", "5", str(LLM))[0] == 2
    plain = tmp_path / "plain.yaml"
    plain.write_text(cli("render", str(EXAMPLES[-1]))[1])
    code, _, err = cli("canary", "promote", str(plain))
    assert code == 2
    assert "no canary" in err
    with pytest.raises(InvalidInput, match="outside"):
        set_percent(list(render(load_example(LLM)).manifests), 101)
    ambiguous = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "r"},
        "spec": {"rules": [{"backendRefs": [{"name": "a"}, {"name": "b"}]}]},
    }
    with pytest.raises(InvalidInput, match="cannot tell stable from canary"):
        set_percent([ambiguous], 10)
