"""KV cache against the device (issue 11): the spec says what one token costs, the caps
say how many tokens, and `model-exceeds-device` / `kv-cache-below-concurrency` compare
weights + KV with the usable share of the GPU or MIG slice, as vLLM does at start."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from podserve.config.model_service import Architecture, ModelService
from podserve.kube.lint import ALL_RULES, lint_documents
from podserve.kube.lint.kv import USABLE_FRACTION, bytes_per_token_of
from podserve.kube.render import render
from podserve.kube.yamlio import dump_all, parse_documents
from tests.kube.paths import EXAMPLES, load_example

MIG = next(p for p in EXAMPLES if p.name == "mig-statefulset.yaml")
PHI3_MINI = {"layers": 32, "kvHeads": 32, "headDim": 96, "kvCacheDtype": "bfloat16"}
RULES = ("model-exceeds-device", "kv-cache-below-concurrency")


def edit(service: ModelService, **changes: Any) -> ModelService:
    document = service.to_document()
    for key, value in changes.items():
        current = document["spec"].get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            current.update(value)
        else:
            document["spec"][key] = value
    return ModelService.model_validate(document)


def findings(service: ModelService) -> dict[str, list[str]]:
    documents = parse_documents(dump_all(render(service).manifests), "rendered.yaml")
    found: dict[str, list[str]] = {rule: [] for rule in RULES}
    for finding in lint_documents(documents, ALL_RULES).findings:
        if finding.rule_id in found:
            found[finding.rule_id].append(finding.message)
    return found


def test_phi3_mini_costs_384_kib_a_token() -> None:
    arch = Architecture.model_validate(PHI3_MINI)
    assert arch.kv_bytes_per_token == 2 * 32 * 32 * 96 * 2 == 384 * 1024
    fp8 = Architecture.model_validate(PHI3_MINI | {"kvCacheDtype": "fp8"})
    assert fp8.kv_bytes_per_token == 192 * 1024
    # The stored spec (camelCase YAML) computes the same.
    assert bytes_per_token_of({"architecture": PHI3_MINI}) == 384 * 1024
    assert bytes_per_token_of({"kvCacheBytesPerToken": 70_000}) == 70_000
    assert bytes_per_token_of({"architecture": {"layers": "x"}}) is None


def test_the_spec_takes_one_kv_size_and_known_dtypes() -> None:
    service = load_example(MIG)
    model = service.to_document()["spec"]["model"]
    with pytest.raises(ValidationError, match="give one"):
        edit(service, model=model | {"kvCacheBytesPerToken": 1000})
    with pytest.raises(ValidationError, match="kvCacheDtype"):
        edit(service, model=model | {"architecture": PHI3_MINI | {"kvCacheDtype": "auto"}})
    with pytest.raises(ValidationError, match="kvHeads"):
        edit(service, model=model | {"architecture": {"layers": 32, "headDim": 96}})


def test_the_mig_example_fits_its_slice() -> None:
    service = load_example(MIG)
    assert service.spec.model.kv_bytes_per_token == 384 * 1024
    assert service.spec.gpu.profile == "1g.20gb"
    assert findings(service) == {rule: [] for rule in RULES}


def test_the_old_mig_example_cannot_serve_one_full_length_sequence() -> None:
    # 1g.10gb: 9Gi usable, 8Gi of weights, 1.5Gi for one 4096-token sequence.
    old = edit(
        load_example(MIG),
        gpu={"migProfile": "1g.10gb"},
        serving={"maxConcurrentSequences": 16},
    )
    found = findings(old)
    assert found["model-exceeds-device"] == [
        "8.0Gi weights + 1.5Gi KV cache for one 4096-token sequence exceed the 9.0Gi usable "
        "(90%) of 1 x 10.0Gi (MIG profile nvidia.com/mig-1g.10gb)"
    ]
    # Not reported twice: when one sequence cannot fit, the batch warning stays silent.
    assert found["kv-cache-below-concurrency"] == []


def test_a_seventh_sequence_overcommits_the_slice() -> None:
    seven = edit(load_example(MIG), serving={"maxConcurrentSequences": 7})
    found = findings(seven)
    assert found["model-exceeds-device"] == []
    assert found["kv-cache-below-concurrency"] == [
        "8.0Gi weights + 10.5Gi KV cache for 7 x 4096 tokens exceed the 18.0Gi usable (90%) "
        "of 1 x 20.0Gi (MIG profile nvidia.com/mig-1g.20gb): 6 full-length sequence(s) fit"
    ]
    # An fp8 cache halves the bytes per token: 13 sequences fit (8 + 13 x 0.75 = 17.75Gi).
    model = seven.to_document()["spec"]["model"]
    fp8 = edit(
        seven,
        model=model | {"architecture": PHI3_MINI | {"kvCacheDtype": "fp8"}},
        serving={"maxConcurrentSequences": 13},
    )
    assert findings(fp8) == {rule: [] for rule in RULES}
    assert (
        "13 full-length"
        in findings(edit(fp8, serving={"maxConcurrentSequences": 14}))[
            "kv-cache-below-concurrency"
        ][0]
    )


def test_without_bytes_per_token_only_the_weights_count() -> None:
    document = edit(load_example(MIG), gpu={"migProfile": "1g.10gb"}).to_document()
    del document["spec"]["model"]["architecture"]
    assert findings(ModelService.model_validate(document)) == {rule: [] for rule in RULES}


def pod(limits: str, *, annotations: str, args: str = "[]", env: str = "[]") -> str:
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: llm, namespace: ml}}
spec:
  selector: {{matchLabels: {{app: llm}}}}
  template:
    metadata: {{labels: {{app: llm}}, annotations: {annotations}}}
    spec:
      nodeSelector: {{nvidia.com/gpu.product: NVIDIA-L4}}
      containers:
        - name: server
          image: s:1
          args: {args}
          env: {env}
          resources: {{limits: {{memory: 64Gi, {limits}}}}}
"""


def lint(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {rule: [] for rule in RULES}
    for finding in lint_documents(parse_documents(text, "t.yaml"), ALL_RULES).findings:
        if finding.rule_id in found:
            found[finding.rule_id].append(finding.message)
    return found


# Llama-3.1-8B: 32 layers, 8 KV heads, head_dim 128, bf16 -> 128 KiB a token; 15Gi weights.
LLAMA = "{podserve.dev/model-size: 15Gi, podserve.dev/kv-cache-bytes-per-token: '131072'}"


def test_caps_come_from_each_servers_own_flags_and_env() -> None:
    # One L4 (24Gi, 21.6Gi usable): 6.6Gi of room = 52k tokens of Llama-3.1-8B's cache.
    vllm = '[--max-model-len, "32768", --max-num-seqs, "4"]'
    found = lint(pod("nvidia.com/gpu: '1'", annotations=LLAMA, args=vllm))
    assert found["model-exceeds-device"] == []
    assert "4 x 32768 tokens" in found["kv-cache-below-concurrency"][0]
    assert found["kv-cache-below-concurrency"][0].endswith(": 1 full-length sequence(s) fit")
    tgi = '["--max-total-tokens=65536"]'
    assert (
        "one 65536-token sequence"
        in (
            lint(pod("nvidia.com/gpu: '1'", annotations=LLAMA, args=tgi))["model-exceeds-device"][0]
        )
    )

    def podserve_env(sequences: int) -> str:
        return (
            "[{name: PODSERVE_MAX_CONTEXT_TOKENS, value: '8192'}, "
            f"{{name: PODSERVE_MAX_CONCURRENT_SEQUENCES, value: '{sequences}'}}]"
        )

    # 8192 tokens x 128 KiB = 1Gi a sequence: 6 fit the 6.6Gi of room, 8 do not.
    fits = lint(pod("nvidia.com/gpu: '1'", annotations=LLAMA, env=podserve_env(6)))
    assert fits == {rule: [] for rule in RULES}
    over = lint(pod("nvidia.com/gpu: '1'", annotations=LLAMA, env=podserve_env(8)))
    assert "8 x 8192 tokens" in over["kv-cache-below-concurrency"][0]


def test_tensor_parallel_devices_add_up() -> None:
    vllm = '[--max-model-len, "65536", --max-num-seqs, "2"]'
    one = lint(pod("nvidia.com/gpu: '1'", annotations=LLAMA, args=vllm))
    assert one["model-exceeds-device"]  # 15Gi + 8Gi > 21.6Gi
    two = lint(pod("nvidia.com/gpu: '2'", annotations=LLAMA, args=vllm))
    assert two == {rule: [] for rule in RULES}  # 15 + 2 x 8 = 31Gi <= 43.2Gi


def test_the_kv_cache_size_annotation_is_the_cache_at_the_caps() -> None:
    annotations = "{podserve.dev/model-size: 15Gi, podserve.dev/kv-cache-size: 8Gi}"
    found = lint(pod("nvidia.com/gpu: '1'", annotations=annotations))
    assert found["model-exceeds-device"] == []
    assert found["kv-cache-below-concurrency"] == [
        "15.0Gi weights + 8.0Gi KV cache (podserve.dev/kv-cache-size) exceed the 21.6Gi "
        "usable (90%) of 1 x 24.0Gi (nvidia.com/gpu.product=NVIDIA-L4)"
    ]


def test_the_usable_fraction_is_vllms_default() -> None:
    assert str(USABLE_FRACTION) == "0.9"


def test_the_canary_example_fits_an_a100_40gb_on_both_tracks() -> None:
    example = next(p for p in EXAMPLES if p.name == "llm-gpu-keda-canary.yaml")
    service = load_example(example)
    assert findings(service) == {rule: [] for rule in RULES}
    # Karpenter's `a100` may be a 40 GB p4d: the 64 sequences it once allowed need 64Gi.
    old = findings(edit(service, serving={"maxConcurrentSequences": 64}))
    assert len(old["kv-cache-below-concurrency"]) == 2  # stable and canary
    assert all(
        m.startswith("16.0Gi weights + 64.0Gi KV cache for 64 x 8192 tokens exceed the 36.0Gi")
        and m.endswith(": 20 full-length sequence(s) fit")
        for m in old["kv-cache-below-concurrency"]
    )
