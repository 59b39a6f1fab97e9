"""From recorded columns to a step's summary: throughput, percentiles, errors, and
goodput under a service-level objective.

Definitions (as in vLLM's benchmark and DistServe):
- TTFT: scheduled start to the first token chunk. For a non-streamed response the first
  output is the whole response, so its TTFT is its latency.
- TPOT: (E2E - TTFT) / (output tokens - 1), per request; 0 for a single token.
- ITL: the gaps between consecutive token chunks, pooled over all requests.
- Goodput: successful requests per second that meet *every* SLO constraint.
- SLO attainment: the fraction of all measured requests (errors included: a 503 does not
  meet any SLO) that succeeded within every constraint.
Latency percentiles are over successful requests only: a fast 503 is not a fast answer,
and errors are reported beside them by status.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from podserve.bench.records import StepColumns, outcome_name
from podserve.core.types import Array

PERCENTILES = (50.0, 90.0, 99.0)
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(us|ms|s|m)?\s*$")
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def parse_duration_s(text: str, default_unit: str = "s") -> float:
    """`250ms`, `1.5s`, `2m`, `800us`; a bare number is in `default_unit`."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration like 250ms, 1.5s or 2m")
    return float(match.group(1)) * _UNIT_S[match.group(2) or default_unit]


@dataclass(frozen=True, slots=True)
class Slo:
    """Per-request latency limits; None means unconstrained."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    @classmethod
    def parse(cls, text: str) -> Slo:
        """`ttft=200ms,tpot=50ms,e2e=2s` (bare numbers are milliseconds)."""
        limits: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            key = key.strip().lower()
            if not sep or key not in {"ttft", "tpot", "e2e"}:
                raise ValueError(f"SLO part {part!r} must be ttft=, tpot= or e2e= a duration")
            limits[f"{key}_s"] = parse_duration_s(value, default_unit="ms")
        return cls(**limits)

    @property
    def is_empty(self) -> bool:
        return self.ttft_s is None and self.tpot_s is None and self.e2e_s is None

    def describe(self) -> str:
        parts = [
            f"{name}≤{limit * 1000:g}ms"
            for name, limit in (("ttft", self.ttft_s), ("tpot", self.tpot_s), ("e2e", self.e2e_s))
            if limit is not None
        ]
        return ", ".join(parts) or "none"

    def met(self, columns: StepColumns) -> Array:
        """One boolean per request: succeeded and within every limit."""
        ok = (columns.status >= 200) & (columns.status < 300)
        if self.e2e_s is not None:
            ok &= columns.latency_s <= self.e2e_s
        if self.ttft_s is not None:
            ok &= first_output_s(columns) <= self.ttft_s
        if self.tpot_s is not None:
            ok &= np.nan_to_num(per_request_tpot_s(columns), nan=0.0) <= self.tpot_s
        return ok


def first_output_s(columns: StepColumns) -> Array:
    """TTFT where the request streamed tokens, else its whole latency."""
    return np.where(np.isnan(columns.ttft_s), columns.latency_s, columns.ttft_s)


def per_request_tpot_s(columns: StepColumns) -> Array:
    """TPOT per request; NaN for requests without token timings."""
    tokens = columns.output_tokens
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(
            tokens > 1,
            (columns.latency_s - columns.ttft_s) / np.maximum(tokens - 1, 1),
            np.where(tokens == 1, 0.0, np.nan),
        )
    return np.where(np.isnan(columns.ttft_s), np.nan, tpot)


@dataclass(frozen=True, slots=True)
class Distribution:
    """Milliseconds."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float


def distribution_ms(values_s: Array) -> Distribution | None:
    values = values_s[~np.isnan(values_s)]
    if values.size == 0:
        return None
    p50, p90, p99 = np.percentile(values, PERCENTILES) * 1000.0
    return Distribution(
        count=int(values.size),
        mean=float(values.mean() * 1000.0),
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        max=float(values.max() * 1000.0),
    )


@dataclass(frozen=True, slots=True)
class StepSummary:
    mode: Literal["concurrency", "rate"]
    level: float
    requests: int
    ok: int
    status_counts: dict[str, int]
    window_s: float
    throughput_rps: float
    goodput_rps: float | None
    slo_attainment: float | None
    slo_met: bool | None
    latency_ms: Distribution | None
    ttft_ms: Distribution | None
    tpot_ms: Distribution | None
    itl_ms: Distribution | None
    output_tokens_per_s: float | None
    mean_in_flight: float
    client_cpu_fraction: float
    send_lag_ms: Distribution | None

    @property
    def errors(self) -> dict[str, int]:
        return {k: v for k, v in self.status_counts.items() if not k.startswith("2")}


def summarize(
    columns: StepColumns,
    mode: Literal["concurrency", "rate"],
    level: float,
    slo: Slo,
    attainment_target: float = 0.99,
) -> StepSummary:
    status = columns.status
    ok_mask = (status >= 200) & (status < 300)
    ok = int(ok_mask.sum())
    window_s = columns.window_s
    codes, counts = np.unique(status, return_counts=True)
    status_counts = {outcome_name(int(c)): int(n) for c, n in zip(codes, counts, strict=True)}
    per_s = 1.0 / window_s if window_s > 0 else 0.0

    goodput_rps = attainment = None
    slo_met: bool | None = None
    if not slo.is_empty:
        met = slo.met(columns)
        goodput_rps = float(met.sum()) * per_s
        attainment = float(met.mean()) if met.size else 0.0
        slo_met = bool(met.size) and attainment >= attainment_target

    streamed = ok_mask & ~np.isnan(columns.ttft_s)
    tokens = int(columns.output_tokens[ok_mask].sum())
    return StepSummary(
        mode=mode,
        level=level,
        requests=columns.count,
        ok=ok,
        status_counts=status_counts,
        window_s=window_s,
        throughput_rps=ok * per_s,
        goodput_rps=goodput_rps,
        slo_attainment=attainment,
        slo_met=slo_met,
        latency_ms=distribution_ms(columns.latency_s[ok_mask]),
        ttft_ms=distribution_ms(columns.ttft_s[streamed]),
        tpot_ms=distribution_ms(per_request_tpot_s(columns)[streamed]),
        itl_ms=distribution_ms(columns.itl_s),
        output_tokens_per_s=tokens * per_s if streamed.any() else None,
        # Little's law: the average number of requests in flight over the window.
        mean_in_flight=float(columns.latency_s.sum()) * per_s,
        client_cpu_fraction=columns.client_cpu_fraction,
        send_lag_ms=distribution_ms(columns.send_lag_s),
    )
