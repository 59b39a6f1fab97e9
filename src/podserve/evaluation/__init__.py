"""`podserve eval`: run a golden set against a deployed endpoint, judge each answer, compare
with a stored baseline, and export the pass ratios to Prometheus.

Imports only `podserve.core` and `podserve.config` from podserve (like `podserve.bench`), so
it can evaluate any server that speaks the Open Inference Protocol or the OpenAI API."""

from podserve.evaluation.baseline import Comparison, compare, load_baseline, save_baseline
from podserve.evaluation.checks import Verdict, contains, cosine, exact, json_schema, numeric, regex
from podserve.evaluation.gate import GateResult, gate
from podserve.evaluation.prom import push, registry_of, write_textfile
from podserve.evaluation.report import to_json, to_markdown, to_text
from podserve.evaluation.results import CaseResult, Ratio, RunResult
from podserve.evaluation.runner import (
    HttpReply,
    HttpxTransport,
    Transport,
    TransportError,
    run_suite,
)
from podserve.evaluation.suite import Case, Suite, parse_suite

__all__ = [
    "Case",
    "CaseResult",
    "Comparison",
    "GateResult",
    "HttpReply",
    "HttpxTransport",
    "Ratio",
    "RunResult",
    "Suite",
    "Transport",
    "TransportError",
    "Verdict",
    "compare",
    "contains",
    "cosine",
    "exact",
    "gate",
    "json_schema",
    "load_baseline",
    "numeric",
    "parse_suite",
    "push",
    "regex",
    "registry_of",
    "run_suite",
    "save_baseline",
    "to_json",
    "to_markdown",
    "to_text",
    "write_textfile",
]
