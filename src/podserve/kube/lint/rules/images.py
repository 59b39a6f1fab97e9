"""Pinning: images not on :latest, models fetched by digest or an immutable revision."""

from __future__ import annotations

import re
from collections.abc import Iterator

from podserve.kube import conventions as c
from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.types import Severity


def image_tag(image: str) -> str | None:
    """The tag of an image reference, None when it has none (a digest counts as a pin)."""
    if "@" in image:
        return "@digest"
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def _latest(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        for ctr in pod.containers(init=True):
            image = str(ctr.spec.get("image", ""))
            tag = image_tag(image)
            if image and tag in {None, "latest"}:
                yield Hit(
                    pod.document,
                    f"{ctr.path}.image",
                    f"image {image} floats ({'no tag' if tag is None else ':latest'})",
                )


IMAGE_LATEST = Rule(
    id="image-latest",
    severity=Severity.WARNING,
    title="Image on :latest or without a tag",
    why="A floating tag makes two replicas of one Deployment run different servers, makes a "
    "rollback restore nothing, and (with pull policy Always) adds a registry round-trip to "
    "every cold start.",
    fix="Use a versioned tag, ideally with its digest (`repo:1.2.3@sha256:...`).",
    check=_latest,
)

_HF_PINNED = re.compile(r"@[0-9a-f]{40}$")


def _unpinned_uri(uri: str) -> bool:
    if uri.startswith("hf://"):
        return _HF_PINNED.search(uri) is None
    if uri.startswith("oci://"):
        return "@sha256:" not in uri
    return False


def _vllm_model(args: list[str]) -> tuple[str, bool] | None:
    """The `--model` (or `vllm serve MODEL`) of a vLLM command and whether a revision pins it."""
    model = None
    for index, arg in enumerate(args):
        if arg.startswith("--model="):
            model = arg.split("=", 1)[1]
        elif index + 1 < len(args) and (
            arg == "--model" or (arg == "serve" and index > 0 and "vllm" in args[index - 1])
        ):
            model = args[index + 1]
    if model is None or model.startswith("/"):
        return None
    pinned = any(a == "--revision" or a.startswith("--revision=") for a in args)
    return model, pinned


def _model_pins(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if c.MODEL_URI in pod.annotations and c.MODEL_DIGEST not in pod.annotations:
            yield Hit(
                pod.document,
                "metadata.annotations",
                f"model {pod.annotations[c.MODEL_URI]} has no {c.MODEL_DIGEST}",
            )
        for uri in pod.extra_models:
            if _unpinned_uri(uri):
                yield Hit(
                    pod.document,
                    "spec.predictor.model.storageUri",
                    f"storageUri {uri} names a moving reference",
                )
        for ctr in pod.containers(init=True):
            args = [str(a) for a in (ctr.spec.get("command") or []) + (ctr.spec.get("args") or [])]
            if "fetch" in args and any("podserve" in a for a in args) and "--digest" not in args:
                yield Hit(pod.document, f"{ctr.path}.args", "podserve fetch without --digest")
            found = _vllm_model(args)
            if found is not None and not found[1] and not found[0].startswith("/"):
                yield Hit(
                    pod.document, f"{ctr.path}.args", f"vLLM serves {found[0]} without --revision"
                )


MODEL_NOT_PINNED = Rule(
    id="model-not-pinned",
    severity=Severity.WARNING,
    title="Model fetched by a moving name, without a digest or revision",
    why="A hub name or tag can be re-pointed: replicas started a day apart then serve "
    "different weights, a canary compares nothing, and a rollback does not bring the old "
    "model back. A digest also lets the fetcher reject a corrupt or partial download.",
    fix="Pin the model: `podserve fetch URI --digest sha256:...`, `hf://org/name@<commit>`, "
    "`oci://...@sha256:...`, or vLLM `--revision <commit>`.",
    check=_model_pins,
)


def _pull_policy(image: str, policy: object) -> str:
    """The effective imagePullPolicy: the API server defaults it to Always for `:latest` or
    an untagged image, else IfNotPresent (pkg/apis/core/v1/defaults.go SetDefaults_Container)."""
    if isinstance(policy, str) and policy:
        return policy
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "IfNotPresent"
    tag = last.rsplit(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def _pull_always(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if not pod.gpu:
            continue
        for ctr in pod.containers(init=True):
            image = str(ctr.spec.get("image", ""))
            if _pull_policy(image, ctr.spec.get("imagePullPolicy")) == "Always":
                yield Hit(
                    pod.document,
                    f"{ctr.path}.imagePullPolicy",
                    f"{image} is pulled on every start of a GPU pod",
                )


PULL_ALWAYS_ON_GPU = Rule(
    id="pull-always-on-gpu",
    severity=Severity.WARNING,
    title="imagePullPolicy Always on a GPU pod",
    why="With Always the kubelet contacts the registry on every container start: each "
    "restart, reschedule and scale-up of a GPU pod waits on a multi-GB CUDA image's manifest "
    "check (and a re-pull when the tag moved), a registry outage or rate limit keeps GPU "
    "pods from starting at all, and a moved tag can put different code on some replicas.",
    fix="Pin the image by digest and use imagePullPolicy: IfNotPresent (pre-pull it on GPU "
    "nodes for fast cold starts).",
    check=_pull_always,
)
