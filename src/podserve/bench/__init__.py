"""Load generator and benchmark tooling: closed- and open-loop load over a raw asyncio
HTTP/1.1 client, SLO goodput, ceiling search, reports and plots.

Imports only `podserve.core` and `podserve.config` from podserve, so it can measure any
server, podserve's or anyone's.
"""

from podserve.bench.ceiling import (
    AutoscalingAdvice,
    CeilingSearch,
    ceiling_level,
    knee_level,
    recommend_autoscaling,
)
from podserve.bench.loop import Budget, ClosedLoop, OpenLoop, run_step
from podserve.bench.report import to_json, to_markdown, write_outputs
from podserve.bench.selftest import ClientLimits, run_self_test
from podserve.bench.stats import Slo, StepSummary, summarize
from podserve.bench.sweep import BenchPlan, BenchResult, run_plan
from podserve.bench.workloads import (
    FileWorkload,
    LengthDistribution,
    OipWorkload,
    OpenAIWorkload,
    Target,
    TensorInput,
)

__all__ = [
    "AutoscalingAdvice",
    "BenchPlan",
    "BenchResult",
    "Budget",
    "CeilingSearch",
    "ClientLimits",
    "ClosedLoop",
    "FileWorkload",
    "LengthDistribution",
    "OipWorkload",
    "OpenAIWorkload",
    "OpenLoop",
    "Slo",
    "StepSummary",
    "Target",
    "TensorInput",
    "ceiling_level",
    "knee_level",
    "recommend_autoscaling",
    "run_plan",
    "run_self_test",
    "run_step",
    "summarize",
    "to_json",
    "to_markdown",
    "write_outputs",
]
