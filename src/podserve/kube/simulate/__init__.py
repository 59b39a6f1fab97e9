"""`podserve simulate`: rendered manifests played on a described cluster under a traffic
trace — pure controller models (scheduler, Deployment/StatefulSet, HPA v2, KEDA, PDB and
eviction, termination, cluster autoscaler) stepping on a virtual clock, and an aggregate
serving model. No API server is needed or faked (DESIGN.md §11)."""

from __future__ import annotations

from podserve.kube.simulate.capacity import BenchCapacity, bench_capacity
from podserve.kube.simulate.cluster import Cluster, cluster_json_schema, load_cluster
from podserve.kube.simulate.engine import COLUMNS, Options, Result, Simulation
from podserve.kube.simulate.events import Event, parse_event
from podserve.kube.simulate.inputs import manifests_from_text, scenario_from_manifests
from podserve.kube.simulate.objects import Scenario
from podserve.kube.simulate.summary import build_summary, text_summary
from podserve.kube.simulate.traffic import Trace, constant, parse_trace

__all__ = [
    "COLUMNS",
    "BenchCapacity",
    "Cluster",
    "Event",
    "Options",
    "Result",
    "Scenario",
    "Simulation",
    "Trace",
    "bench_capacity",
    "build_summary",
    "cluster_json_schema",
    "constant",
    "load_cluster",
    "manifests_from_text",
    "parse_event",
    "parse_trace",
    "scenario_from_manifests",
    "text_summary",
]
