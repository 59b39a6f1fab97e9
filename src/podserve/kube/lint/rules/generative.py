"""Generative servers need a cap on concurrent sequences and on context length: the KV
cache grows with both, and without caps one burst or one long prompt takes the GPU."""

from __future__ import annotations

from collections.abc import Iterator

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import Container, PodView
from podserve.kube.lint.signals import (
    GENERATIVE,
    args_of,
    env_names,
    flag_value,
    generative,
    server_container,
)
from podserve.kube.types import Severity

# (concurrency caps, context caps) per server: podserve's settings (env), vLLM's
# `--max-num-seqs` / `--max-model-len` (docs.vllm.ai engine args), TGI's
# `--max-concurrent-requests` / `--max-total-tokens` (and their env forms, text-generation-
# launcher --help), SGLang's `--max-running-requests` / `--context-length`.
_ENV_CAPS = (
    {"PODSERVE_MAX_CONCURRENT_SEQUENCES", "MAX_CONCURRENT_REQUESTS", "MAX_BATCH_SIZE"},
    {"PODSERVE_MAX_CONTEXT_TOKENS", "MAX_TOTAL_TOKENS", "MAX_INPUT_TOKENS"},
)
_FLAG_CAPS = (
    ("--max-num-seqs", "--max-concurrent-requests", "--max-running-requests"),
    ("--max-model-len", "--max-total-tokens", "--context-length", "--max-input-tokens"),
)
_ENGINES = ("vllm", "text-generation-launcher", "text-generation-inference", "sglang")


def _generative(ctx: LintContext, pod: PodView, ctr: Container) -> bool:
    if generative(ctx, pod):
        return True
    text = " ".join([str(ctr.spec.get("image", "")), *args_of(ctr)]).lower()
    return any(engine in text for engine in _ENGINES)


def _no_caps(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        ctr = server_container(pod)
        if ctr is None or not _generative(ctx, pod, ctr):
            continue
        args, env = args_of(ctr), env_names(ctr)
        missing = [
            label
            for label, names, flags in zip(
                ("concurrent sequences", "context length"), _ENV_CAPS, _FLAG_CAPS, strict=True
            )
            if not (env & names) and flag_value(args, *flags) is None
        ]
        if missing:
            yield Hit(
                pod.document,
                f"{ctr.path}",
                f"generative server has no cap on {' or '.join(missing)}",
            )


GENERATIVE_NO_CAPS = Rule(
    id="generative-no-caps",
    severity=Severity.WARNING,
    title="Generative server without concurrency and context caps",
    why="The KV cache a generative server needs is concurrent sequences x context tokens x "
    "bytes per token. Without explicit caps the limits are whatever the engine guesses from "
    "the model's maximum context (often 32k-128k tokens): admission cannot reject early, one "
    "burst or a few long prompts exhaust the cache, and requests stall, get preempted or the "
    f"process runs out of memory. Detected from the {GENERATIVE} annotation, the stored "
    "ModelService's model.generative, or a vLLM, TGI or SGLang server.",
    fix="Set the caps: podserve PODSERVE_MAX_CONCURRENT_SEQUENCES and "
    "PODSERVE_MAX_CONTEXT_TOKENS (spec serving.maxConcurrentSequences / maxContextTokens), "
    "vLLM --max-num-seqs and --max-model-len, TGI --max-concurrent-requests and "
    "--max-total-tokens.",
    check=_no_caps,
)
