"""Credentials written into manifests as literal environment values."""

from __future__ import annotations

import re
from collections.abc import Iterator

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.types import Severity

_SECRET_NAME = re.compile(
    # Whole words of the name: HF_TOKEN and AWS_SECRET_ACCESS_KEY, not MAX_CONTEXT_TOKENS.
    r"(?:^|_)(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?)"
    r"(?:_|$)",
    re.I,
)
_SECRET_VALUE = re.compile(
    r"^(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|"
    r"gh[pousr]_[A-Za-z0-9]{30,}|xox[baprs]-[A-Za-z0-9-]{10,})$"
)


def _literal(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        for ctr in pod.containers(init=True):
            for index, env in enumerate(ctr.spec.get("env") or []):
                name, value = str(env.get("name", "")), env.get("value")
                if not isinstance(value, str) or not value:
                    continue
                if _SECRET_NAME.search(name) or _SECRET_VALUE.match(value):
                    yield Hit(
                        pod.document,
                        f"{ctr.path}.env[{index}]",
                        f"{name} holds a literal credential",
                    )


SECRET_LITERAL_ENV = Rule(
    id="secret-literal-env",
    severity=Severity.ERROR,
    title="Secret as a literal environment value",
    why="A token in a manifest lives in git, in `kubectl get -o yaml` output, in CI logs and "
    "in every rendered chart; hub and cloud tokens for model downloads are a common leak.",
    fix="Put it in a Secret and use `env[].valueFrom.secretKeyRef` (or envFrom), or use "
    "workload identity instead of a key.",
    check=_literal,
)
