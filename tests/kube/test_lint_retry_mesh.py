"""`retries-in-two-layers` under Istio ambient mode (waypoints), mesh (GAMMA) routes and
the mesh-wide default retry policy (meshConfig.defaultHttpRetryPolicy)."""

from __future__ import annotations

import pytest

from tests.kube.test_lint_gateway_rules import (
    RETRY_RULE,
    SHARED,
    config_map,
    found,
    gateway,
    namespace,
    virtual_service,
)

AMBIENT = "istio.io/dataplane-mode: ambient"
NS_WAYPOINT = f"{{{AMBIENT}, istio.io/use-waypoint: wp}}"


def service(labels: str = "{}") -> str:
    return f"""
---
apiVersion: v1
kind: Service
metadata: {{name: llm, namespace: ml, labels: {labels}}}
spec: {{selector: {{app: llm}}, ports: [{{name: http, port: 8000}}]}}
"""


def front(*, ns: str = "{}", svc: str = "{}", pod_labels: str = "{app: gw}") -> str:
    return (
        namespace(ns) + config_map("gw-config", SHARED) + gateway(labels=pod_labels) + service(svc)
    )


def waypoint_gateway(labels: str = "{}", name: str = "wp", ns: str = "ml") -> str:
    return f"""
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: {ns}, labels: {labels}}}
spec:
  gatewayClassName: istio-waypoint
  listeners: [{{name: mesh, port: 15008, protocol: HBONE}}]
"""


def mesh_route(retry: str, name: str = "llm-mesh") -> str:
    return f"""
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: ml}}
spec:
  parentRefs: [{{group: "", kind: Service, name: llm, port: 8000}}]
  rules: [{{backendRefs: [{{name: llm, port: 8000}}], retry: {retry}}}]
"""


INGRESS_ROUTE = """
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: llm, namespace: ml}
spec:
  parentRefs: [{name: edge, namespace: infra}]
  rules: [{backendRefs: [{name: llm, port: 8000}], retry: {attempts: 2}}]
"""


def mesh_config(policy: str, name: str = "istio", rev: str = "default") -> str:
    return f"""
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: {name}, namespace: istio-system, labels: {{istio.io/rev: {rev}}}}}
data:
  mesh: |-
    trustDomain: cluster.local
    {policy}
"""


# --- ambient: the podserve gateway's traffic through the pool Service's waypoint -------


@pytest.mark.parametrize(
    ("ns", "svc", "pod_labels", "waypoint"),
    [
        (NS_WAYPOINT, "{}", "{app: gw}", "wp"),  # the Namespace enrols the Service
        (f"{{{AMBIENT}}}", "{istio.io/use-waypoint: wp}", "{app: gw}", "wp"),
        # the pod joins the ambient mesh by its own label
        ("{istio.io/use-waypoint: wp}", "{}", f"{{app: gw, {AMBIENT}}}", "wp"),
        # a waypoint in another namespace
        (
            f"{{{AMBIENT}}}",
            "{istio.io/use-waypoint: shared, istio.io/use-waypoint-namespace: infra}",
            "{app: gw}",
            "infra/shared",
        ),
        # the Service's own waypoint wins over its Namespace's
        (NS_WAYPOINT, "{istio.io/use-waypoint: llm-wp}", "{app: gw}", "llm-wp"),
    ],
)
def test_an_ambient_gateway_is_retried_by_the_services_waypoint(
    ns: str, svc: str, pod_labels: str, waypoint: str
) -> None:
    [message] = found(front(ns=ns, svc=svc, pod_labels=pod_labels), RETRY_RULE)
    assert (
        f"where waypoint {waypoint} of Service ml/llm (Istio's default retry policy) "
        "retries ml/llm 2 times more" in message
    )
    assert "up to 3.6 times its requests" in message


@pytest.mark.parametrize(
    ("ns", "svc", "pod_labels", "extra"),
    [
        # ambient, but no waypoint: ztunnel is L4 only and never retries
        (f"{{{AMBIENT}}}", "{}", "{app: gw}", ""),
        # the Service opts out of its Namespace's waypoint
        (NS_WAYPOINT, "{istio.io/use-waypoint: none}", "{app: gw}", ""),
        # the pod opts out of its Namespace's ambient mode
        (NS_WAYPOINT, "{}", "{app: gw, istio.io/dataplane-mode: none}", ""),
        # out of the mesh, the gateway reaches the pods directly: no waypoint
        ("{istio.io/use-waypoint: wp}", "{}", "{app: gw}", ""),
        # ...even when the Service asks for ingress traffic through it: that label is
        # read for Istio's ingress gateways, not for any pod outside the mesh
        (
            "{istio.io/use-waypoint: wp}",
            '{istio.io/ingress-use-waypoint: "true"}',
            "{app: gw}",
            "",
        ),
        # a waypoint for workload traffic only takes no Service traffic
        (NS_WAYPOINT, "{}", "{app: gw}", waypoint_gateway("{istio.io/waypoint-for: workload}")),
        # a mesh route turns the waypoint's retries off for the Service
        (NS_WAYPOINT, "{}", "{app: gw}", virtual_service(0)),
        (NS_WAYPOINT, "{}", "{app: gw}", mesh_route("{attempts: 0}")),
        # the mesh default turned off
        (NS_WAYPOINT, "{}", "{app: gw}", mesh_config("defaultHttpRetryPolicy: {attempts: 0}")),
    ],
)
def test_ambient_without_a_retrying_waypoint_is_one_layer(
    ns: str, svc: str, pod_labels: str, extra: str
) -> None:
    assert not found(front(ns=ns, svc=svc, pod_labels=pod_labels) + extra, RETRY_RULE)


def test_a_waypoint_for_service_traffic_is_used() -> None:
    for labels in ("{istio.io/waypoint-for: service}", "{istio.io/waypoint-for: all}"):
        assert found(front(ns=NS_WAYPOINT) + waypoint_gateway(labels), RETRY_RULE)


def test_a_sidecar_pod_in_an_ambient_namespace_retries_in_its_sidecar() -> None:
    """A pod with a sidecar is never captured by ztunnel, and a sidecar does not send to
    waypoints: its own outbound policy retries."""
    ns = f"{{{AMBIENT}, istio-injection: enabled, istio.io/use-waypoint: wp}}"
    [message] = found(front(ns=ns), RETRY_RULE)
    assert "where Istio's default retry policy retries ml/llm 2 times more" in message
    assert "waypoint" not in message


@pytest.mark.parametrize(
    ("extra", "where", "times"),
    [
        (virtual_service(3), "VirtualService llm", 3),
        (mesh_route("{attempts: 4}"), "HTTPRoute llm-mesh", 4),
        (
            mesh_config("defaultHttpRetryPolicy: {attempts: 5}"),
            "defaultHttpRetryPolicy of ConfigMap istio-system/istio",
            5,
        ),
    ],
)
def test_the_waypoint_applies_the_services_mesh_policy(extra: str, where: str, times: int) -> None:
    [message] = found(front(ns=NS_WAYPOINT) + extra, RETRY_RULE)
    assert f"waypoint wp of Service ml/llm ({where}) retries ml/llm {times} times more" in message


# --- ingress routes: istio.io/ingress-use-waypoint ----------------------------------------


@pytest.mark.parametrize(
    ("ns", "svc"),
    [
        ("{istio.io/use-waypoint: wp}", '{istio.io/ingress-use-waypoint: "true"}'),
        ('{istio.io/use-waypoint: wp, istio.io/ingress-use-waypoint: "true"}', "{}"),
        ("{}", '{istio.io/use-waypoint: wp, istio.io/ingress-use-waypoint: "True"}'),
    ],
)
def test_an_ingress_route_through_the_waypoint_gets_its_default_retries(ns: str, svc: str) -> None:
    [message] = found(namespace(ns) + service(svc) + INGRESS_ROUTE, RETRY_RULE)
    assert (
        "the gateway retries llm 2 times and waypoint wp of Service ml/llm "
        "(Istio's default retry policy) retries it 2 times more" in message
    )


@pytest.mark.parametrize(
    ("ns", "svc"),
    [
        ("{istio.io/use-waypoint: wp}", "{}"),  # ingress traffic skips the waypoint
        # the Service's label wins over its Namespace's
        (
            '{istio.io/use-waypoint: wp, istio.io/ingress-use-waypoint: "true"}',
            '{istio.io/ingress-use-waypoint: "false"}',
        ),
        ('{istio.io/ingress-use-waypoint: "true"}', "{}"),  # no waypoint to go through
        (
            '{istio.io/use-waypoint: wp, istio.io/ingress-use-waypoint: "true"}',
            "{istio.io/use-waypoint: none}",
        ),
    ],
)
def test_an_ingress_route_that_skips_the_waypoint_is_one_layer(ns: str, svc: str) -> None:
    assert not found(namespace(ns) + service(svc) + INGRESS_ROUTE, RETRY_RULE)


# --- mesh (GAMMA) routes -----------------------------------------------------------------


def test_a_mesh_route_is_not_an_ingress_layer() -> None:
    """An HTTPRoute whose parent is the Service is the mesh's own route: its retries are
    the mesh layer, not a gateway in front of it."""
    assert not found(service() + mesh_route("{attempts: 2}") + virtual_service(3), RETRY_RULE)
    # bound to a Gateway as well, it is still an ingress route
    both = mesh_route("{attempts: 2}").replace(
        "parentRefs: [", "parentRefs: [{name: edge, namespace: infra}, "
    )
    [message] = found(service() + both + virtual_service(3), RETRY_RULE)
    assert "VirtualService llm retries it 3 times more" in message


def test_a_mesh_route_sets_the_sidecars_retries() -> None:
    injected = "{istio-injection: enabled}"
    [message] = found(front(ns=injected) + mesh_route("{attempts: 4}"), RETRY_RULE)
    assert "where HTTPRoute llm-mesh retries ml/llm 4 times more" in message
    assert not found(front(ns=injected) + mesh_route("{attempts: 0}"), RETRY_RULE)


# --- meshConfig.defaultHttpRetryPolicy ---------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("defaultHttpRetryPolicy: {attempts: 0}", None),
        # a policy without attempts disables retries too (retry.ConvertPolicy)
        ("defaultHttpRetryPolicy: {retryOn: 5xx}", None),
        (
            "defaultHttpRetryPolicy: {attempts: 3}",
            "defaultHttpRetryPolicy of ConfigMap istio-system/istio retries ml/llm 3 times",
        ),
        ("accessLogFile: /dev/stdout", "Istio's default retry policy retries ml/llm 2 times"),
    ],
)
def test_the_mesh_default_policy_replaces_istios_2_retries(
    policy: str, expected: str | None
) -> None:
    text = front(ns="{istio-injection: enabled}") + mesh_config(policy)
    messages = found(text, RETRY_RULE)
    if expected is None:
        assert not messages
    else:
        [message] = messages
        assert expected in message


def test_the_mesh_config_of_the_sidecars_revision_counts() -> None:
    configs = mesh_config("defaultHttpRetryPolicy: {attempts: 0}") + mesh_config(
        "defaultHttpRetryPolicy: {attempts: 3}", name="istio-canary", rev="canary"
    )
    [message] = found(front(ns="{istio.io/rev: canary}") + configs, RETRY_RULE)
    assert "ConfigMap istio-system/istio-canary retries ml/llm 3 times" in message
    assert not found(front(ns="{istio-injection: enabled}") + configs, RETRY_RULE)
    # the waypoint follows its own revision's istiod
    revised = waypoint_gateway("{istio.io/rev: canary}")
    [message] = found(front(ns=NS_WAYPOINT) + revised + configs, RETRY_RULE)
    assert "(defaultHttpRetryPolicy of ConfigMap istio-system/istio-canary)" in message
    assert not found(front(ns=NS_WAYPOINT) + waypoint_gateway() + configs, RETRY_RULE)
