"""`podserve render` of a ModelService `async:` section: the consumer Deployment, the KEDA
ScaledObject on the redis-streams scaler and its TriggerAuthentication; they validate
against the Kubernetes and KEDA schemas and lint clean, and the asyncq rules catch the
usual mistakes in them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from podserve.cli.main import main
from podserve.config.model_service import ModelService
from podserve.kube.apiserver import server_problems
from podserve.kube.lint import ALL_RULES, lint_documents
from podserve.kube.render import render
from podserve.kube.types import Manifest
from podserve.kube.validation import CrdCatalog, validate_manifests
from podserve.kube.yamlio import dump_all, parse_documents
from tests.kube.helpers import with_spec
from tests.kube.paths import EXAMPLES, load_example

CPU = next(p for p in EXAMPLES if p.name == "sklearn-cpu-hpa.yaml")
ASYNC: dict[str, Any] = {
    "redis": {"address": "redis.queues.svc:6379", "password": {"secret": "redis", "key": "pw"}},
    "stream": "fraud-requests",
    "resultsStream": "fraud-results",
    "deadLetterStream": "fraud-dead",
    "activation": 2,
}


def service(**changes: Any) -> ModelService:
    return with_spec(load_example(CPU), **{"async": {**ASYNC, **changes}})


def consumer_objects(svc: ModelService) -> dict[str, Manifest]:
    return {
        m["kind"]: m
        for m in render(svc).manifests
        if m["metadata"]["labels"].get("app.kubernetes.io/component") == "consumer"
    }


def findings(svc: ModelService) -> set[str]:
    text = dump_all(render(svc).manifests)
    return {
        f.rule_id for f in lint_documents(parse_documents(text, "rendered"), ALL_RULES).findings
    }


def test_renders_deployment_scaled_object_and_trigger_authentication() -> None:
    objects = consumer_objects(service())
    assert sorted(objects) == [
        "Deployment",
        "NetworkPolicy",
        "ScaledObject",
        "TriggerAuthentication",
    ]
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    args = ctr["args"]
    assert ctr["command"] == ["podserve"]
    assert args[:3] == ["consume", "--redis", "redis://redis.queues.svc:6379/0"]
    flag = {args[i]: args[i + 1] for i in range(1, len(args) - 1, 2)}
    assert flag["--stream"] == "fraud-requests"
    assert flag["--group"] == "podserve"
    assert flag["--results-stream"] == "fraud-results"
    assert flag["--dead-letter-stream"] == "fraud-dead"
    assert flag["--max-failures"] == "3"
    # Results retention: the spec's defaults, as the consumer's flags.
    assert (flag["--results-ttl-s"], flag["--results-maxlen"]) == ("86400", "1000000")
    # Request and dead-letter retention: deleted once acknowledged, dead letters capped.
    assert flag["--dead-letter-maxlen"] == "100000"
    assert args[-1] == "--delete-acknowledged"
    # 1 s read + 2 x 5 s (the example's longestRequestSeconds) = 11 s, then the margin.
    assert flag["--drain-timeout-s"] == "11"
    assert pod["terminationGracePeriodSeconds"] == 11 + 5
    env = {e["name"]: e for e in ctr["env"]}
    # The password is a file from the Secret, never an environment variable.
    assert "REDIS_PASSWORD" not in env
    assert flag["--redis-password-file"] == "/var/run/secrets/podserve/redis/password"
    (mount,) = [m for m in ctr["volumeMounts"] if m["name"] == "redis-password"]
    assert mount == {
        "name": "redis-password",
        "mountPath": "/var/run/secrets/podserve/redis",
        "readOnly": True,
    }
    (volume,) = [v for v in pod["volumes"] if v["name"] == "redis-password"]
    assert volume["secret"]["secretName"] == "redis"
    assert volume["secret"]["items"] == [{"key": "pw", "path": "password"}]
    assert env["PODSERVE_MODELS"]["value"].startswith("fraud-score=/cache/entries/sha256-")
    assert "replicas" not in objects["Deployment"]["spec"]  # KEDA owns the count
    # The serving Service selects name + track; consumers carry no track.
    labels = objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert "podserve.dev/track" not in labels

    scaled = objects["ScaledObject"]["spec"]
    assert scaled["scaleTargetRef"]["name"] == "fraud-score-consumer"
    assert (scaled["minReplicaCount"], scaled["maxReplicaCount"]) == (0, 10)
    assert scaled["cooldownPeriod"] == 600
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == "redis-streams"
    assert trigger["metadata"] == {
        "address": "redis.queues.svc:6379",
        "databaseIndex": "0",
        "stream": "fraud-requests",
        "consumerGroup": "podserve",
        "enableTLS": "false",
        "lagCount": "10",
        "activationLagCount": "2",
    }
    assert trigger["authenticationRef"] == {"name": "fraud-score-consumer"}
    auth = objects["TriggerAuthentication"]["spec"]
    assert auth == {"secretTargetRef": [{"parameter": "password", "name": "redis", "key": "pw"}]}


def test_rendered_objects_validate_and_lint_clean() -> None:
    svc = service()
    assert validate_manifests(render(svc).manifests, CrdCatalog.bundled()) == []
    assert findings(svc) == set()


def test_rendering_is_deterministic() -> None:
    assert dump_all(render(service()).manifests) == dump_all(render(service()).manifests)


def test_without_password_there_is_no_trigger_authentication() -> None:
    svc = service(redis={"address": "redis:6379", "tls": True, "database": 2})
    objects = consumer_objects(svc)
    assert "TriggerAuthentication" not in objects
    (trigger,) = objects["ScaledObject"]["spec"]["triggers"]
    assert "authenticationRef" not in trigger
    assert trigger["metadata"]["enableTLS"] == "true"
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert args[2] == "rediss://redis:6379/2"
    assert "--redis-password-file" not in args
    assert all(v["name"] != "redis-password" for v in pod["volumes"])


@pytest.mark.parametrize(
    ("changes", "rule"),
    [
        ({"deadLetterStream": None}, "consumer-no-dead-letter"),
        ({"graceSeconds": 6}, "consumer-grace-short"),
        ({"scaleOn": "pendingEntries"}, "redis-streams-pending-no-wake"),
    ],
)
def test_the_usual_mistakes_are_caught(changes: dict[str, Any], rule: str) -> None:
    assert rule in findings(service(**changes))


def test_pending_entries_with_a_warm_replica_is_fine() -> None:
    svc = service(scaleOn="pendingEntries", minReplicas=1)
    assert "redis-streams-pending-no-wake" not in findings(svc)
    (trigger,) = consumer_objects(svc)["ScaledObject"]["spec"]["triggers"]
    assert trigger["metadata"]["pendingEntriesCount"] == "10"


def test_results_retention_is_passed_to_the_consumer() -> None:
    svc = service(resultsRetentionSeconds=3600, resultsMaxLen=0)
    args = consumer_objects(svc)["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    flag = {args[i]: args[i + 1] for i in range(1, len(args) - 1, 2)}
    assert (flag["--results-ttl-s"], flag["--results-maxlen"]) == ("3600", "0")
    with pytest.raises(ValidationError, match="resultsRetentionSeconds"):
        service(resultsRetentionSeconds=0)


@pytest.mark.parametrize(
    ("changes", "flag", "delete", "dead_maxlen"),
    [
        ({}, "--delete-acknowledged", True, 100_000),
        ({"deleteAcknowledged": False, "deadLetterMaxLen": 0}, "--keep-acknowledged", False, 0),
        ({"deadLetterMaxLen": 500}, "--delete-acknowledged", True, 500),
    ],
)
def test_request_and_dead_letter_retention_reach_the_consumer_cli(
    changes: dict[str, Any], flag: str, delete: bool, dead_maxlen: int
) -> None:
    """The rendered args, parsed by `podserve consume`'s own parser, give the spec's
    request-stream and dead-letter retention."""
    from podserve.cli.main import build_parser

    args = consumer_objects(service(**changes))["Deployment"]["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert args[-1] == flag
    parsed = build_parser().parse_args(args)
    assert (parsed.delete_acknowledged, parsed.dead_letter_maxlen) == (delete, dead_maxlen)
    with pytest.raises(ValidationError, match="deadLetterMaxLen"):
        service(deadLetterMaxLen=-1)


def test_min_above_max_is_refused() -> None:
    with pytest.raises(ValidationError, match="minReplicas must not exceed"):
        service(minReplicas=5, maxReplicas=2)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str]]:
    """`podserve ARGS...` through the real entry point: (exit code, stdout)."""

    def run(*argv: str) -> tuple[int, str]:
        code = main(list(argv))
        return code, capsys.readouterr().out

    return run


def monitors(svc: ModelService) -> dict[str, Manifest]:
    return {m["metadata"]["name"]: m for m in render(svc).manifests if m["kind"] == "PodMonitor"}


def selects(monitor: Manifest, pod_labels: dict[str, str]) -> bool:
    wanted: dict[str, str] = monitor["spec"]["selector"]["matchLabels"]
    return all(pod_labels.get(k) == v for k, v in wanted.items())


def test_a_pod_monitor_scrapes_the_consumers_metrics_port() -> None:
    svc = service()
    manifests = render(svc).manifests
    deployments = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "Deployment"}
    consumer = deployments["fraud-score-consumer"]["spec"]["template"]
    server = deployments["fraud-score"]["spec"]["template"]
    found = monitors(svc)
    mine, serving = found["fraud-score-consumer"], found["fraud-score"]
    (endpoint,) = mine["spec"]["podMetricsEndpoints"]
    # It picks the consumer pods and not the server's ...
    assert selects(mine, consumer["metadata"]["labels"])
    assert not selects(mine, server["metadata"]["labels"])
    # ... on a port name their container declares, where --metrics-port listens; the
    # operator keeps only targets whose container port has that name.
    (ctr,) = consumer["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    args = ctr["args"]
    assert endpoint["port"] == "metrics"
    assert str(ports[endpoint["port"]]) == args[args.index("--metrics-port") + 1]
    assert endpoint["path"] == "/metrics"
    # The server's monitor picks the consumer pods too, by name, but they have no `http`
    # port: no target there, so nothing is scraped twice.
    assert selects(serving, consumer["metadata"]["labels"])
    assert serving["spec"]["podMetricsEndpoints"][0]["port"] not in ports
    # Labelled as the server's series are: `service`, and `component` instead of a track
    # (the serving autoscaler's queries select a track, so consumers never feed them).
    rules = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    assert rules == {
        "service": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
        "component": ["__meta_kubernetes_pod_label_app_kubernetes_io_component"],
    }
    assert mine["metadata"]["namespace"] == serving["metadata"]["namespace"]


def test_the_pod_monitor_follows_spec_monitoring() -> None:
    svc = with_spec(service(), monitoring={"podMonitor": False})
    assert monitors(svc) == {}


def test_with_the_pod_monitor_it_passes_the_api_server_checks_and_lint_strict(
    cli: Callable[..., tuple[int, str]], tmp_path: Path
) -> None:
    svc = service()
    assert "fraud-score-consumer" in monitors(svc)
    assert validate_manifests(render(svc).manifests, CrdCatalog.bundled()) == []
    problems = server_problems(list(render(svc).manifests))
    assert problems == [], [str(p) for p in problems]
    spec = tmp_path / "async.yaml"
    spec.write_text(dump_all([svc.to_document()]))
    assert cli("render", str(spec), "-o", str(tmp_path / "out"))[0] == 0
    code, out = cli("lint", "--strict", str(tmp_path / "out"))
    assert code == 0, out
    assert "0 error(s), 0 warning(s), 0 info" in out


def test_the_consumer_pod_gets_the_workload_identity_its_fetch_needs() -> None:
    """The consumer runs the same fetch init container as the serving pods: Azure's
    webhook injects the federated token only into pods labelled for it."""
    svc = with_spec(
        load_example(CPU),
        **{"async": ASYNC},
        credentials={"azureClientId": "6c5a2f64-0d6c-4f2a-9b8e-1f7f3c2d9a10"},
    )
    deployment = consumer_objects(svc)["Deployment"]
    template = deployment["spec"]["template"]
    assert "fetch" in {i["name"] for i in template["spec"]["initContainers"]}
    assert template["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    assert template["spec"]["serviceAccountName"] == svc.metadata.name
    # the selector stays what it was: a label added later must not change it
    assert "azure.workload.identity/use" not in deployment["spec"]["selector"]["matchLabels"]
