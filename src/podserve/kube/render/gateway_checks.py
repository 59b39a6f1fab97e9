"""What `podserve render` refuses in a `kind: Gateway` spec beyond what the spec model
checks: values the API server would take but that break the gateway, or that Kubernetes
would only reject at apply time. Each refusal names the field; nothing is rewritten.
"""

from __future__ import annotations

import re
from collections import Counter

from podserve.config.gateway_spec import Gateway
from podserve.config.service_base import quantity_value
from podserve.core.errors import InvalidInput

# A namespace name is an RFC 1123 label (Kubernetes apimachinery validation.IsDNS1123Label):
# at most 63 characters of [a-z0-9-], starting and ending alphanumeric.
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_LABEL_MAX = 63


def check_gateway(gw: Gateway, env_names: list[str]) -> None:
    """Raise InvalidInput naming the field of the first problem; `env_names` are the
    gateway container's env vars in render order."""
    problems = [
        *_fail_open(gw),
        *_resources(gw),
        *_duplicate_env(env_names),
        *_namespaces(gw),
    ]
    if problems:
        raise InvalidInput(f"Gateway {gw.metadata.name}: {'; '.join(problems)}")


# The gateway Deployment's rolling update (render/gateway.py): one new pod is started
# before an old one stops, so a rollout at the HPA's ceiling runs maxReplicas + 1 pods.
ROLLOUT_SURGE = 1


def most_replicas(gw: Gateway) -> int:
    """The HPA's maxReplicas (always rendered; the spec model keeps it >= replicas)."""
    return max(gw.spec.max_replicas, gw.spec.replicas)


def _fail_open(gw: Gateway) -> list[str]:
    # While the store is down each replica admits on its own, up to budget ÷
    # failOpen.replicas (docs/gateway.md "Fail-open"). If the HPA may run more pods than
    # that divisor, the replicas together admit up to maxReplicas ÷ failOpen.replicas
    # times the budget. The surge pod counts: an outage during a rollout (a config change
    # rolls every pod) is as likely as one at any other time, and the budget is a hard
    # limit. The user's number is not raised silently: it is their statement of how the
    # budget is shared, and they may prefer a lower maxReplicas.
    fail_open = gw.spec.config.fail_open
    most = most_replicas(gw) + ROLLOUT_SURGE
    if not fail_open.enabled or fail_open.replicas >= most:
        return []
    return [
        f"config.failOpen.replicas is {fail_open.replicas} but maxReplicas is "
        f"{most - ROLLOUT_SURGE}, and a rolling update adds {ROLLOUT_SURGE} pod: during a "
        f"store outage each replica admits budget ÷ {fail_open.replicas}, so {most} "
        f"replicas could spend {most / fail_open.replicas:g} times the budget; set "
        f"config.failOpen.replicas to at least {most}, or lower maxReplicas"
    ]


def _resources(gw: Gateway) -> list[str]:
    # The same quantity grammar ModelService checks its resources with (service_base.py);
    # the API server would reject anything else at apply time, after the spec "rendered".
    problems = []
    for field, text in (("cpu", gw.spec.cpu), ("memory", gw.spec.memory)):
        try:
            value = quantity_value(text)
        except ValueError as exc:
            problems.append(f"{field}: {exc}")
            continue
        if value <= 0:
            # The HPA's utilisation is a share of the CPU request, and a zero memory
            # limit leaves no room for the process.
            problems.append(f"{field}: {text!r} must be more than zero")
        elif field == "memory" and text.endswith("m"):
            # Kubernetes reads `m` as milli: 512m is half a byte, a typo for 512Mi.
            problems.append(f"memory: {text!r} is {value} bytes (m is milli); use Mi or Gi")
    return problems


def _duplicate_env(env_names: list[str]) -> list[str]:
    # Two entries with one name in a container's env: the kubelet keeps the last, so one
    # Secret silently shadows the other (and server-side apply rejects the list, whose
    # merge key is the name).
    repeated = sorted(name for name, count in Counter(env_names).items() if count > 1)
    if not repeated:
        return []
    return [
        f"secrets: env var(s) {', '.join(repeated)} set more than once in the gateway "
        "container (spec.secrets[].env, and egressProxy's HTTPS_PROXY/HTTP_PROXY/NO_PROXY)"
    ]


def _namespaces(gw: Gateway) -> list[str]:
    problems = []
    fields = (
        ("allowFromNamespaces", gw.spec.allow_from_namespaces),
        ("monitoring.prometheusNamespaces", gw.spec.monitoring.prometheus_namespaces),
    )
    for field, names in fields:
        for name in names:
            if len(name) > _DNS1123_LABEL_MAX or not _DNS1123_LABEL.match(name):
                problems.append(
                    f"{field}: {name!r} is not a namespace name (a DNS-1123 label: at most "
                    "63 characters of a-z, 0-9 and '-', starting and ending alphanumeric)"
                )
    return problems
