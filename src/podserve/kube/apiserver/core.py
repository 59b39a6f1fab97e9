"""Core group: what `ValidatePodSpec` rejects in a pod (and every pod template) that the
OpenAPI schema lets through, and one mistake it accepts that only fails at run time.

- extended resources (`nvidia.com/gpu`, MIG profiles): integers, request = limit, and a
  limit whenever there is a request (`ValidateResourceRequirements`,
  `ValidateResourceQuantityValue`; the helpers `IsExtendedResourceName`,
  `IsOvercommitAllowed` in pkg/apis/core/helper/helpers.go);
- container port names: IANA_SVC_NAME, at most 15 characters, unique in the container
  (`validateContainerPorts` with apimachinery's `IsValidPortName`);
- preStop/postStart sleeps within the grace period (`validateSleepAction`);
- topology spread: maxSkew above 0, minDomains only with DoNotSchedule, one constraint per
  (topologyKey, whenUnsatisfiable), matchLabelKeys only beside a labelSelector and never
  naming one of its keys (`validateTopologySpreadConstraints`);
- a probe naming a port no container declares: accepted, then the kubelet cannot resolve
  it (`findPortByName` returns `port <name> not found`, the Atoi fallback fails) and the probe
  errors on every period: a warning, not an API error.

Source: pkg/apis/core/validation/validation.go in kubernetes/kubernetes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from podserve.config.model_service import quantity_value
from podserve.kube.apiserver.errors import (
    CORE_VALIDATION,
    KUBELET_PROBER,
    ErrorType,
    FieldError,
    Path,
    Quantity,
    items,
    mapping,
)
from podserve.kube.types import Severity

_PORT_CHARSET = re.compile(r"^[-a-z0-9]+$")
_PORT_LETTER = re.compile(r"[a-z]")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


def is_native(name: str) -> bool:
    """No domain, or the kubernetes.io domain (`IsNativeResource`)."""
    return "/" not in name or "kubernetes.io/" in name


def is_extended(name: str) -> bool:
    """`IsExtendedResourceName`: a domain-prefixed name outside kubernetes.io that is still a
    qualified name once prefixed with `requests.` (how ResourceQuota names it)."""
    if is_native(name) or name.startswith("requests."):
        return False
    prefix, _, short = f"requests.{name}".rpartition("/")
    return bool(prefix) and len(short) <= 63 and bool(_QUALIFIED_NAME.match(short))


def overcommit_allowed(name: str) -> bool:
    return is_native(name) and not name.startswith("hugepages-")


def port_name_errors(name: str) -> list[str]:
    """apimachinery `IsValidPortName`, message for message."""
    errors = []
    if len(name) > 15:
        errors.append("must be no more than 15 characters")
    if not _PORT_CHARSET.match(name):
        errors.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    elif not _PORT_LETTER.search(name):
        errors.append("must contain at least one letter (a-z)")
    if "--" in name:
        errors.append("must not contain consecutive hyphens")
    if name and (name[0] == "-" or name[-1] == "-"):
        errors.append("must not begin or end with a hyphen")
    return errors


def _quantity(raw: Any) -> tuple[Quantity, Any]:
    try:
        value = quantity_value(str(raw))
    except ValueError:
        return Quantity(raw, None), None
    return Quantity(raw, value), value


def _resources(obj: str, ctr: dict[str, Any], path: Path) -> Iterator[FieldError]:
    resources = mapping(ctr.get("resources"))
    limits, requests = mapping(resources.get("limits")), mapping(resources.get("requests"))
    lim_path, req_path = path.child("limits"), path.child("requests")
    for values, base in ((limits, lim_path), (requests, req_path)):
        for name in sorted(values):
            shown, number = _quantity(values[name])
            # ValidateResourceQuantityValue: MilliValue() % 1000 != 0 for integer resources.
            if is_extended(name) and number is not None and (number * 1000) % 1000 != 0:
                yield FieldError(
                    obj,
                    str(base.key(name)),
                    ErrorType.INVALID,
                    shown,
                    "must be an integer",
                    CORE_VALIDATION,
                )
    for name in sorted(requests):
        shown, number = _quantity(requests[name])
        if name in limits:
            limit_shown, limit = _quantity(limits[name])
            if number is None or limit is None:
                continue  # the schema check reports an unparsable quantity
            if number != limit and not overcommit_allowed(name):
                yield FieldError(
                    obj,
                    str(req_path),
                    ErrorType.INVALID,
                    str(shown),
                    f"must be equal to {name} limit of {limit_shown}",
                    CORE_VALIDATION,
                )
            elif number > limit:
                yield FieldError(
                    obj,
                    str(req_path),
                    ErrorType.INVALID,
                    str(shown),
                    f"must be less than or equal to {name} limit of {limit_shown}",
                    CORE_VALIDATION,
                )
        elif not overcommit_allowed(name):
            yield FieldError(
                obj,
                str(lim_path),
                ErrorType.REQUIRED,
                None,
                "Limit must be set for non overcommitable resources",
                CORE_VALIDATION,
            )


def _ports(obj: str, ctr: dict[str, Any], path: Path) -> Iterator[FieldError]:
    seen: set[str] = set()
    for i, port in enumerate(items(ctr.get("ports"))):
        name = str(mapping(port).get("name") or "")
        if not name:
            continue
        at = str(path.index(i).child("name"))
        errors = port_name_errors(name)
        for detail in errors:
            yield FieldError(obj, at, ErrorType.INVALID, name, detail, CORE_VALIDATION)
        if not errors and name in seen:
            yield FieldError(obj, at, ErrorType.DUPLICATE, name, "", CORE_VALIDATION)
        seen.add(name)


def _probe_ports(
    obj: str, ctr: dict[str, Any], path: Path, declared: set[str]
) -> Iterator[FieldError]:
    own = {str(mapping(p).get("name")) for p in items(ctr.get("ports")) if mapping(p).get("name")}
    for kind in _PROBES:
        probe = mapping(ctr.get(kind))
        for handler in ("httpGet", "tcpSocket"):
            port = mapping(probe.get(handler)).get("port")
            if not isinstance(port, str) or port.isdigit():
                continue
            at = str(path.child(kind, handler, "port"))
            errors = port_name_errors(port)
            for detail in errors:
                yield FieldError(obj, at, ErrorType.INVALID, port, detail, CORE_VALIDATION)
            if errors or port in own:
                continue
            where = (
                "another container declares it, but a probe only resolves its own container's ports"
                if port in declared
                else "no container declares it"
            )
            yield FieldError(
                obj,
                at,
                ErrorType.NOT_FOUND,
                port,
                f"accepted by the API server, but the kubelet cannot resolve it ({where}): "
                f'every probe errors with `port {port} not found` / `strconv.Atoi: parsing "{port}"'
                "`",
                KUBELET_PROBER,
                Severity.WARNING,
            )


def _sleep(obj: str, ctr: dict[str, Any], path: Path, grace: Any) -> Iterator[FieldError]:
    """`validateSleepAction`: a preStop/postStart sleep within the grace period (the
    message of 1.33+, where PodLifecycleSleepActionAllowZero is on by default)."""
    for hook in ("preStop", "postStart"):
        sleep = mapping(mapping(mapping(ctr.get("lifecycle")).get(hook)).get("sleep"))
        seconds = sleep.get("seconds")
        if isinstance(seconds, int) and isinstance(grace, int) and not 0 <= seconds <= grace:
            yield FieldError(
                obj, str(path.child("lifecycle", hook, "sleep", "seconds")), ErrorType.INVALID,
                seconds,
                f"must be non-negative and less than terminationGracePeriodSeconds ({grace})",
                CORE_VALIDATION,
            )  # fmt: skip


def _spread(obj: str, pod: dict[str, Any], path: Path) -> Iterator[FieldError]:
    """`validateTopologySpreadConstraints` with the template form of
    `ValidateMatchLabelKeysInTopologySpread` (a pod template is not merged first)."""
    seen: set[tuple[str, str]] = set()
    for i, constraint in enumerate(items(pod.get("topologySpreadConstraints"))):
        constraint = mapping(constraint)
        at = path.child("topologySpreadConstraints").index(i)
        skew = constraint.get("maxSkew")
        if isinstance(skew, int) and skew <= 0:
            yield FieldError(
                obj,
                str(at.child("maxSkew")),
                ErrorType.INVALID,
                skew,
                "must be greater than zero",
                CORE_VALIDATION,
            )
        when = str(constraint.get("whenUnsatisfiable", ""))
        if "minDomains" in constraint and when == "ScheduleAnyway":
            yield FieldError(
                obj,
                str(at.child("minDomains")),
                ErrorType.INVALID,
                constraint["minDomains"],
                "can only use minDomains if whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway",
                CORE_VALIDATION,
            )
        pair = (str(constraint.get("topologyKey", "")), when)
        if pair in seen:
            yield FieldError(
                obj, str(at), ErrorType.DUPLICATE, f"{{{pair[0]}, {pair[1]}}}", "", CORE_VALIDATION
            )
        seen.add(pair)
        keys = [str(k) for k in items(constraint.get("matchLabelKeys"))]
        selector = constraint.get("labelSelector")
        if keys and not isinstance(selector, dict):
            yield FieldError(
                obj,
                str(at.child("matchLabelKeys")),
                ErrorType.FORBIDDEN,
                None,
                "must not be specified when labelSelector is not set",
                CORE_VALIDATION,
            )
            continue
        selected = set(mapping(mapping(selector).get("matchLabels")))
        selected |= {
            str(mapping(e).get("key")) for e in items(mapping(selector).get("matchExpressions"))
        }
        for j, key in enumerate(keys):
            if key in selected:
                yield FieldError(
                    obj, str(at.child("matchLabelKeys").index(j)), ErrorType.INVALID, key,
                    "exists in both matchLabelKeys and labelSelector", CORE_VALIDATION,
                )  # fmt: skip


def check_pod_spec(obj: str, pod: dict[str, Any], path: Path) -> Iterator[FieldError]:
    """Every check above over one pod spec at `path` (`spec` or `spec.template.spec`)."""
    containers = [
        (section, i, mapping(c))
        for section in ("initContainers", "containers", "ephemeralContainers")
        for i, c in enumerate(items(pod.get(section)))
    ]
    declared = {
        str(mapping(p).get("name"))
        for _, _, ctr in containers
        for p in items(ctr.get("ports"))
        if mapping(p).get("name")
    }
    # SetDefaults_PodSpec fills in 30 s before validation runs.
    grace = pod.get("terminationGracePeriodSeconds", 30)
    for section, i, ctr in containers:
        base = path.child(section).index(i)
        yield from _resources(obj, ctr, base.child("resources"))
        yield from _sleep(obj, ctr, base, grace)
        yield from _ports(obj, ctr, base.child("ports"))
        yield from _probe_ports(obj, ctr, base, declared)
    yield from _spread(obj, pod, path)
