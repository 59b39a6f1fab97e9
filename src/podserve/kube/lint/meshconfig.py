"""Istio's mesh-wide default retry policy, read from the mesh config among the linted
objects.

Where no VirtualService (or Gateway API route) sets `retries` for a Service, Istio's
proxies retry it by `meshConfig.defaultHttpRetryPolicy`: "The default number of retry
attempts is set at 2 ... Setting the number of attempts to 0 disables retry policy
globally. This setting can be overridden on a per-host basis using the Virtual Service
API" (istio/api, mesh/v1alpha1/config.proto, `default_http_retry_policy`; istio.io docs,
"Global Mesh Options"). The route builder takes the mesh policy when the route sets none
and converts it with `retry.ConvertPolicy`: no policy at all is the built-in 2 retries,
and a policy whose `attempts` is 0 or unset retries nothing ("Configuration is explicitly
disabling the retry policy"; istio/istio, pilot/pkg/networking/core/route/retry/retry.go).

istiod reads its mesh config from the ConfigMap `istio` (`istio-<revision>` for a
revision) in its own namespace, usually istio-system, key `mesh`, a YAML MeshConfig
(istio/istio, manifests/charts/istio-control/istio-discovery/templates/configmap.yaml,
which also labels it `istio.io/rev`). A proxy follows the istiod of its revision; when
that revision's ConfigMap is not among the linted objects but exactly one is, that one is
taken (a revision tag cannot be resolved from manifests); with none, Istio's built-in
policy (2 retries).
"""

from __future__ import annotations

from collections.abc import Mapping

import yaml

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.mesh import ISTIO_REV, strings

ISTIO_DEFAULT_ATTEMPTS = 2
BUILT_IN = "Istio's default retry policy"


def _mesh_configs(ctx: LintContext) -> list[tuple[str, str, int]]:
    """(revision, where, default attempts) for each istiod mesh ConfigMap."""
    found = []
    for doc in ctx.of_kind("ConfigMap"):
        meta = doc.manifest.get("metadata") or {}
        name = str(meta.get("name", ""))
        text = (doc.manifest.get("data") or {}).get("mesh")
        if not (name == "istio" or name.startswith("istio-")) or not isinstance(text, str):
            continue
        try:
            mesh = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        if not isinstance(mesh, Mapping):
            mesh = {}
        policy = mesh.get("defaultHttpRetryPolicy")
        where, attempts = BUILT_IN, ISTIO_DEFAULT_ATTEMPTS
        if isinstance(policy, Mapping):
            where = f"defaultHttpRetryPolicy of ConfigMap {meta.get('namespace', '')}/{name}"
            value = policy.get("attempts", 0)
            attempts = value if isinstance(value, int) else 0
        revision = strings(meta.get("labels")).get(ISTIO_REV) or name.removeprefix("istio-")
        found.append(("default" if name == "istio" else revision, where, attempts))
    return found


def default_retry(ctx: LintContext, revision: str | None) -> tuple[str, int]:
    """(where, attempts) of the default retry policy of the istiod `revision` programs."""
    configs = _mesh_configs(ctx)
    wanted = revision or "default"
    for rev, where, attempts in configs:
        if rev == wanted:
            return where, attempts
    if len(configs) == 1:
        return configs[0][1], configs[0][2]
    return BUILT_IN, ISTIO_DEFAULT_ATTEMPTS
