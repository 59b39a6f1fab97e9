"""Whether a pod's traffic goes through a service-mesh proxy, as the mesh itself decides.

Istio injects its sidecar at pod creation by a mutating webhook, by this policy (istio.io
docs, "Installing the Sidecar" → "Controlling the injection policy"):

- `istio-injection=disabled` on the Namespace, or the pod label
  `sidecar.istio.io/inject: "false"`, and the pod gets no sidecar;
- the pod label `sidecar.istio.io/inject: "true"` or `istio.io/rev`, in any namespace
  (the webhook's objectSelector), and it gets one;
- `istio-injection=enabled` or `istio.io/rev` on the Namespace (the namespaceSelector;
  `istio-injection` wins when both are set), and it gets one unless the pod opts out.

The pod *annotation* `sidecar.istio.io/inject` is deprecated in favour of the label
(istio/api#1997) and is read only once the webhook is called, that is in a namespace
that enables injection: there "false" opts the pod out, and "true" alone, in a namespace
that does not, injects nothing (istio/istio#34082). When the Namespace is not among the
linted objects its labels are unknown; a pod annotated "true" is then taken as its author
says, injected.

Linkerd injects its proxy into pods annotated `linkerd.io/inject: enabled` (or
`ingress`), on the pod or on its Namespace; `disabled` on the pod opts it out (linkerd.io
docs, "Automatically Adding the Linkerd Proxy").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.pods import PodView

ISTIO_INJECT = "sidecar.istio.io/inject"
ISTIO_REV = "istio.io/rev"
ISTIO_INJECTION = "istio-injection"
LINKERD_INJECT = "linkerd.io/inject"


def namespace_meta(ctx: LintContext, name: str) -> Mapping[str, Any] | None:
    """The Namespace object's metadata, or None when it is not among the linted objects."""
    for doc in ctx.of_kind("Namespace"):
        meta = doc.manifest.get("metadata") or {}
        if str(meta.get("name", "")) == name:
            return meta
    return None


def strings(raw: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


def istio_sidecar(ctx: LintContext, pod: PodView) -> bool:
    """Whether Istio's webhook gives this pod a sidecar (the policy above)."""
    namespace = namespace_meta(ctx, pod.namespace)
    ns_labels = strings((namespace or {}).get("labels"))
    label = pod.labels.get(ISTIO_INJECT)
    if label == "false" or ns_labels.get(ISTIO_INJECTION) == "disabled":
        return False
    if label == "true" or ISTIO_REV in pod.labels:
        return True
    annotation = pod.annotations.get(ISTIO_INJECT)
    if namespace is None:
        return annotation == "true"
    webhook = ns_labels.get(ISTIO_INJECTION) == "enabled" or (
        ISTIO_INJECTION not in ns_labels and ISTIO_REV in ns_labels
    )
    return webhook and annotation != "false"


def istio_revision(ctx: LintContext, pod: PodView) -> str | None:
    """The istiod revision that programs the pod's sidecar (None: the default one), by
    the same selectors as the injection webhook: the pod's `istio.io/rev` label, else the
    Namespace's, unless `istio-injection=enabled` picks the default revision there."""
    own = pod.labels.get(ISTIO_REV)
    if own is None and pod.labels.get(ISTIO_INJECT) != "true":
        ns_labels = strings((namespace_meta(ctx, pod.namespace) or {}).get("labels"))
        if ns_labels.get(ISTIO_INJECTION) != "enabled":
            own = ns_labels.get(ISTIO_REV)
    return None if own in {None, "default"} else own


def linkerd_proxy(ctx: LintContext, pod: PodView) -> bool:
    """Whether Linkerd's proxy injector meshes this pod."""
    own = pod.annotations.get(LINKERD_INJECT)
    if own is not None:
        return own in {"enabled", "ingress"}
    namespace = namespace_meta(ctx, pod.namespace) or {}
    return strings(namespace.get("annotations")).get(LINKERD_INJECT) in {"enabled", "ingress"}
