"""Invariants over many specs (Hypothesis): rendering is deterministic, the spec stored in
the output renders the same output again, and rendered output lints clean."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podserve.config.model_service import ModelService
from podserve.kube import conventions as c
from podserve.kube.lint import ALL_RULES, lint_documents
from podserve.kube.render import render
from podserve.kube.types import Document, Source
from podserve.kube.yamlio import dump_all

_DIGEST = st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda h: f"sha256:{h}")


@st.composite
def specs(draw: st.DrawFn) -> ModelService:
    gpus = draw(st.integers(0, 4))
    low = draw(st.integers(1, 4))
    high = draw(st.integers(low, 10))
    load = draw(st.floats(1, 2400, allow_nan=False))
    spec: dict[str, Any] = {
        "model": {
            "uri": "s3://bucket/model",
            "digest": draw(_DIGEST),
            "runtime": draw(st.sampled_from(["onnx", "torch", "transformers"])),
            "loadSeconds": load,
            "generative": True,
        },
        "replicas": {"min": low, "max": high},
        "gpu": {"count": gpus},
        "resources": {
            "cpu": draw(st.sampled_from(["500m", "2", "8"])),
            "memory": draw(st.sampled_from(["4Gi", "48Gi"])),
            "shm": draw(st.sampled_from(["256Mi", "2Gi"])),
        },
        "serving": {
            "longestRequestSeconds": draw(st.floats(1, 600, allow_nan=False)),
            "maxConcurrentSequences": 16,
            "maxContextTokens": 4096,
        },
        # A private bucket: the fetch gets keys from a Secret, or the role from IRSA.
        "credentials": draw(
            st.sampled_from(
                [{"secret": "models"}, {"awsRoleArn": "arn:aws:iam::123456789012:role/m"}]
            )
        ),
        "spread": {"zones": draw(st.booleans())},
        "rollout": {"spareGpu": draw(st.booleans())},
        "workload": draw(st.sampled_from(["Deployment", "StatefulSet"])),
        "cache": {"kind": draw(st.sampled_from(["hostPath", "emptyDir"]))},
    }
    if low != high or draw(st.booleans()):
        spec["autoscaling"] = {
            "engine": draw(st.sampled_from(["hpa", "keda"])),
            # ttft-p95 alone lags (lint: latency-only-scaling-metric); a spec that asks
            # for it gets that warning on purpose.
            "metric": draw(st.sampled_from(["queue-depth", "inflight"])),
        }
    if draw(st.booleans()):
        spec["gateway"] = {"name": "gw"}
        if draw(st.booleans()):
            spec["canary"] = {
                "model": {
                    "uri": "s3://bucket/next",
                    "digest": draw(_DIGEST),
                    "runtime": "onnx",
                    "loadSeconds": load,
                },
                "percent": draw(st.integers(0, 100)),
            }
    if gpus:
        spec["quota"] = {"gpus": gpus * (high + 4)}
    if gpus and draw(st.booleans()):
        spec["coldStart"] = {"prePull": True, "headroomPods": draw(st.integers(0, 2))}
    return ModelService.model_validate(
        {
            "apiVersion": "podserve.dev/v1alpha1",
            "kind": "ModelService",
            "metadata": {"name": "svc", "namespace": "ns"},
            "spec": spec,
        }
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs())
def test_rendering_is_deterministic_and_reproducible_from_its_stored_spec(
    service: ModelService,
) -> None:
    first = dump_all(render(service).manifests)
    assert dump_all(render(service).manifests) == first
    stored = next(
        m
        for m in render(service).manifests
        if m["kind"] == "ConfigMap" and c.SPEC_FILE in m.get("data", {})
    )
    again = ModelService.model_validate(yaml.safe_load(stored["data"][c.SPEC_FILE]))
    assert again == service
    assert dump_all(render(again).manifests) == first


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs())
def test_rendered_output_lints_clean(service: ModelService) -> None:
    documents = [Document(m, Source("rendered", 1)) for m in render(service).manifests]
    findings = lint_documents(documents, ALL_RULES).findings
    assert findings == (), [f"{f.rule_id}: {f.object} {f.message}" for f in findings]
