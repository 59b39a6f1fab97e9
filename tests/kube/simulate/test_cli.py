"""`podserve simulate` end to end through the real entry point: files written, fields
present, progress, and clear errors (exit 2, one line naming the problem) on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from podserve.kube.simulate import COLUMNS, cluster_json_schema, load_cluster
from podserve.kube.yamlio import dump_all

from ..conftest import CliRunner
from ..paths import REPO_ROOT
from .builders import reference_manifests

CLUSTERS = sorted((REPO_ROOT / "examples" / "clusters").glob("*.yaml"))
SPOT = REPO_ROOT / "examples" / "kube" / "spot-scale-to-zero.yaml"
GKE = REPO_ROOT / "examples" / "clusters" / "gke.yaml"


def test_published_cluster_schema_matches_the_model() -> None:
    published = json.loads((REPO_ROOT / "schemas" / "cluster.schema.json").read_text())
    assert published == cluster_json_schema(), (
        "regenerate schemas/cluster.schema.json (docs/simulate.md says how)"
    )


@pytest.mark.parametrize("path", CLUSTERS, ids=lambda p: p.stem)
def test_example_clusters_load_and_validate(path: Path) -> None:
    load_cluster(path.read_text(), str(path))
    jsonschema.validate(yaml.safe_load(path.read_text()), cluster_json_schema())


def test_contract_keys_work_as_written() -> None:
    text = """
apiVersion: podserve.dev/v1alpha1
kind: Cluster
metadata: {name: example}
spec:
  nodePools:
    - name: a100
      count: 3
      min: 0
      max: 8
      labels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
      taints: [{key: nvidia.com/gpu, value: "present", effect: NoSchedule}]
      allocatable: {cpu: "30", memory: 200Gi, nvidia.com/gpu: 1}
      pricePerHourUsd: 3.5
      spot: false
      provisioningSeconds: 300
      imagePullSeconds: 60
      reclaimNoticeSeconds: 30
"""
    pool = load_cluster(text).spec.node_pools[0]
    assert (pool.count, pool.min_nodes, pool.max_nodes, pool.price_per_hour_usd) == (3, 0, 8, 3.5)
    assert (pool.provisioning_seconds, pool.image_pull_seconds) == (300, 60)
    assert pool.reclaim_notice_seconds == 30
    assert pool.taints[0].value == "present"


def test_spec_input_writes_summary_timeline_and_plot(cli: CliRunner, tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("seconds,requests_per_second\n0,0\n600,30\n1200,2\n1800,0\n")
    code, out, err = cli(
        "simulate",
        str(SPOT),
        "--cluster",
        str(GKE),
        "--out",
        str(tmp_path / "out"),
        "--traffic",
        str(trace),
        "--duration",
        "2400",
        "--seed",
        "3",
        "--event",
        "spot-reclaim@1000:t4-spot",
        "--format",
        "json",
    )
    assert code == 0, err
    summary = json.loads(out)
    assert summary == json.loads((tmp_path / "out" / "summary.json").read_text())
    for key in (
        "scheduled",
        "unschedulable",
        "rollout",
        "requests",
        "latency_p99_s",
        "gpu_hours",
        "cost_usd",
        "scale_events",
        "findings",
    ):
        assert key in summary
    assert summary["rollout"] is None
    requests = summary["requests"]
    assert requests["offered"] == requests["served"] + requests["rejected"] + requests["cut"]
    assert any(e["reason"].endswith("activation") for e in summary["scale_events"])
    timeline = json.loads((tmp_path / "out" / "timeline.json").read_text())
    assert len(timeline) == 2400
    assert set(timeline[0]) == {"t", *COLUMNS}
    assert (tmp_path / "out" / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_manifest_input_text_format_and_rollout(cli: CliRunner, tmp_path: Path) -> None:
    manifests = tmp_path / "rendered.yaml"
    manifests.write_text(dump_all(reference_manifests()))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "podserve.dev/v1alpha1",
                "kind": "Cluster",
                "metadata": {"name": "t"},
                "spec": {
                    "nodePools": [
                        {
                            "name": "gpu",
                            "count": 3,
                            "taints": [
                                {
                                    "key": "nvidia.com/gpu",
                                    "value": "present",
                                    "effect": "NoSchedule",
                                }
                            ],
                            "allocatable": {"cpu": "30", "memory": "200Gi", "nvidia.com/gpu": 1},
                        }
                    ]
                },
            }
        )
    )
    code, out, err = cli(
        "simulate",
        str(manifests),
        "--cluster",
        str(cluster),
        "--out",
        str(tmp_path / "o"),
        "--rate",
        "1",
        "--duration",
        "1500",
        "--event",
        "rollout@300",
    )
    assert code == 0, err
    assert "scheduled: yes" in out
    assert "rollout: completed in" in out
    assert "requests:" in out
    assert "findings:" in out


def test_progress_on_long_simulations(cli: CliRunner, tmp_path: Path) -> None:
    code, _, err = cli(
        "simulate",
        str(SPOT),
        "--cluster",
        str(GKE),
        "--out",
        str(tmp_path),
        "--rate",
        "0",
        "--duration",
        str(6 * 3600),
    )
    assert code == 0
    assert "simulated 21600/21600 s (100%)" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--event", "explode@5"], "unknown kind"),
        (["--event", "spot-reclaim@5:nope"], "no node pool 'nope'"),
        (["--event", "rollout@5:nope"], "no workload 'nope'"),
        (["--duration", "0"], "--duration must be between 1 and"),
        (["--duration", "999999999"], "--duration must be between 1 and"),
        (["--rate", "-1"], "--rate must be >= 0"),
    ],
)
def test_bad_arguments_exit_2_naming_the_problem(
    cli: CliRunner, tmp_path: Path, args: list[str], message: str
) -> None:
    code, _, err = cli("simulate", str(SPOT), "--cluster", str(GKE), "--out", str(tmp_path), *args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_unwritable_output_exits_2(cli: CliRunner, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code, _, err = cli(
        "simulate",
        str(SPOT),
        "--cluster",
        str(GKE),
        "--out",
        str(blocker / "x"),
        "--duration",
        "10",
    )
    assert code == 2
    assert "cannot write to" in err


def test_bad_files_exit_2(cli: CliRunner, tmp_path: Path) -> None:
    bad_cluster = tmp_path / "c.yaml"
    bad_cluster.write_text(
        "apiVersion: podserve.dev/v1alpha1\nkind: Cluster\nmetadata: {name: x}\n"
        "spec: {nodePools: [{name: a, count: 2, max: 1, allocatable: {}}]}\n"
    )
    code, _, err = cli("simulate", str(SPOT), "--cluster", str(bad_cluster), "--out", str(tmp_path))
    assert code == 2
    assert "min <= count <= max" in err
    bad_input = tmp_path / "in.yaml"
    bad_input.write_text("kind: ConfigMap\napiVersion: v1\nmetadata: {name: x}\n")
    code, _, err = cli("simulate", str(bad_input), "--cluster", str(GKE), "--out", str(tmp_path))
    assert code == 2
    assert "no Deployment or StatefulSet" in err
    broken = tmp_path / "broken.yaml"
    docs = reference_manifests()
    docs[0]["spec"]["replicas"] = "three"
    docs[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "lots"
    broken.write_text(dump_all(docs))
    code, _, err = cli("simulate", str(broken), "--cluster", str(GKE), "--out", str(tmp_path))
    assert code == 2
    assert "cannot read the manifests" in err
    code, _, err = cli(
        "simulate",
        str(SPOT),
        "--cluster",
        str(GKE),
        "--out",
        str(tmp_path),
        "--bench",
        str(bad_input),
    )
    assert code == 2
    assert "--bench" in err
    assert "is not JSON" in err
    empty = tmp_path / "bench.json"
    empty.write_text('{"steps": []}')
    code, _, err = cli(
        "simulate", str(SPOT), "--cluster", str(GKE), "--out", str(tmp_path), "--bench", str(empty)
    )
    assert code == 2
    assert "bench result has no steps" in err


def _step(level: float, mean_ms: float, p99_ms: float, in_flight: float) -> dict[str, object]:
    """A step as `podserve bench` writes it (report.py serialises StepSummary with orjson)."""
    import orjson

    from podserve.bench.stats import Distribution, StepSummary

    dist = Distribution(count=100, mean=mean_ms, p50=mean_ms, p90=p99_ms, p99=p99_ms, max=p99_ms)
    summary = StepSummary(
        mode="concurrency",
        level=level,
        requests=100,
        ok=100,
        status_counts={"200": 100},
        window_s=10.0,
        throughput_rps=level * 1000 / mean_ms,
        goodput_rps=None,
        slo_attainment=None,
        slo_met=None,
        latency_ms=dist,
        ttft_ms=None,
        tpot_ms=None,
        itl_ms=None,
        output_tokens_per_s=None,
        mean_in_flight=in_flight,
        client_cpu_fraction=0.1,
        send_lag_ms=None,
    )
    loaded: dict[str, object] = orjson.loads(orjson.dumps(summary))
    return loaded


def test_bench_result_sets_capacity(cli: CliRunner, tmp_path: Path) -> None:
    result = {
        "plan": {"mode": "concurrency"},
        "steps": [_step(1, 20.0, 30.0, 1.0), _step(8, 25.0, 60.0, 8.0), _step(32, 90.0, 400.0, 32)],
        "ceiling": 8,
        "knee": 32,
    }
    bench = tmp_path / "result.json"
    bench.write_text(json.dumps(result))
    code, out, err = cli(
        "simulate",
        str(SPOT),
        "--cluster",
        str(GKE),
        "--out",
        str(tmp_path / "o"),
        "--bench",
        str(bench),
        "--rate",
        "5",
        "--duration",
        "900",
        "--format",
        "json",
    )
    assert code == 0, err
    capacity = json.loads(out)["capacity"]["embedder"]
    assert capacity == {
        "concurrency": 8,
        "max_queue": 64,
        "service_s": 0.02,
        "service_p99_s": 0.06,
        "source": "bench",
    }
    assert not any(f["id"] == "capacity-assumed" for f in json.loads(out)["findings"])


def test_docs_name_every_cluster_key_summary_field_and_column() -> None:
    from podserve.kube.simulate import build_summary

    from .builders import gpu_cluster, simulation

    docs = (REPO_ROOT / "docs" / "simulate.md").read_text()
    schema = cluster_json_schema()
    for model in ("NodePool", "Autoscaler", "ClusterSpec"):
        for key in schema["$defs"][model]["properties"]:
            assert f"`{key}`" in docs or f"`nodePools[].{key}`" in docs, key
    tenant_row = next(line for line in docs.splitlines() if line.startswith("| `pods[]`"))
    for key in schema["$defs"]["TenantPods"]["properties"]:
        assert key in tenant_row, key
    for column in COLUMNS:
        assert f"`{column}`" in docs, column
    summary = build_summary(simulation(reference_manifests(), gpu_cluster(), 60).run(), seed=0)
    for field in summary:
        assert f"`{field}`" in docs, field
