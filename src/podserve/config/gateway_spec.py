"""`kind: Gateway`: how `podserve render` deploys the gateway (Deployment, Service, PDB,
HPA on CPU, NetworkPolicy, ConfigMap, Secret references). `spec.config` is the gateway's own
config (gateway_config.py), checked here so a bad config fails at render, not at rollout.

Several replicas need the shared store: the spec refuses `store.kind: sqlite` (each replica
would keep its own budgets and limits — the multiplication LiteLLM #40291 reports), and the
store's URL and DSN come from a Secret, never from the spec.

`egressProxy` sets the proxy environment the gateway's upstream client reads
(config/egress_proxy.py). A proxy that got the pods' traffic would break every request
(it cannot reach cluster-internal names), so every pool endpoint must be covered by
`noProxy`; that is checked here, against the rule the gateway itself applies.
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from podserve.config.egress_proxy import (
    PROXY_ENV,
    parse_proxy,
    proxied_endpoints,
    proxy_env_names,
)
from podserve.config.gateway_config import GatewayConfig, RedisPostgresStore
from podserve.core.errors import InvalidInput

_DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class GatewayMetadata(_Spec):
    name: str = Field(pattern=_DNS_LABEL, max_length=53, description="Object names.")
    namespace: str = Field("default", pattern=_DNS_LABEL, description="Namespace.")


class SecretEnv(_Spec):
    env: str = Field(pattern=_ENV_NAME, description="Env var the gateway reads.")
    secret: str = Field(pattern=_DNS_LABEL, description="Secret name.")
    key: str = Field(min_length=1, description="Key in the Secret.")


class EgressProxy(_Spec):
    https_proxy: str | None = Field(
        None,
        description="http://host:port (or https:// for TLS to the proxy itself) of the "
        "proxy for https upstreams (hosted APIs), tunnelled with CONNECT; or "
        "socks5://, socks5h:// (the proxy resolves names) for a SOCKS5 proxy. A URL with "
        "credentials goes in spec.secrets as HTTPS_PROXY instead.",
    )
    http_proxy: str | None = Field(None, description="The proxy for http upstreams.")
    no_proxy: list[str] = Field(
        default_factory=lambda: [".svc", ".cluster.local"],
        description="Hosts, domains (with their subdomains), IPs and CIDRs that go direct; "
        "every pool endpoint must be one of them.",
    )

    @model_validator(mode="after")
    def _usable(self) -> EgressProxy:
        for name, value in (("httpsProxy", self.https_proxy), ("httpProxy", self.http_proxy)):
            if value is None:
                continue
            parse_proxy(value, name)  # ValueError names the field
            if urlsplit(value if "://" in value else f"http://{value}").username is not None:
                raise ValueError(
                    f"{name}: credentials belong in a Secret (spec.secrets, env "
                    f"{'HTTPS_PROXY' if name == 'httpsProxy' else 'HTTP_PROXY'}), not the spec"
                )
        return self

    def env(self) -> list[dict[str, str]]:
        out = []
        if self.https_proxy:
            out.append({"name": "HTTPS_PROXY", "value": self.https_proxy})
        if self.http_proxy:
            out.append({"name": "HTTP_PROXY", "value": self.http_proxy})
        out.append({"name": "NO_PROXY", "value": ",".join(self.no_proxy)})
        return out


class GatewayMonitoring(_Spec):
    pod_monitor: bool = Field(True, description="Render a PodMonitor scraping /metrics.")
    rules: bool = Field(True, description="Render a PrometheusRule with the gateway's alerts.")
    error_ratio: float = Field(
        0.05, gt=0, lt=1, description="Alert when more than this share of requests get 5xx."
    )
    prometheus_namespaces: list[str] = Field(
        default_factory=lambda: ["monitoring"],
        description="Where Prometheus runs: let through the NetworkPolicy to /metrics when "
        "allowFromNamespaces limits who may call the gateway.",
    )


class GatewaySpec(_Spec):
    image: str = Field(min_length=1, description="podserve image, pinned by tag or digest.")
    replicas: int = Field(2, ge=2, description="Floor; a proxy needs at least two.")
    max_replicas: int = Field(10, ge=2, description="HPA ceiling.")
    target_cpu_percent: int = Field(
        70, ge=10, le=95, description="HPA target: a proxy is CPU-bound, so CPU fits."
    )
    cpu: str = Field("1", description="CPU request (and the HPA's 100%).")
    memory: str = Field("512Mi", description="Memory request and limit.")
    port: int = Field(8080, ge=1, le=65535, description="Service and container port.")
    secrets: list[SecretEnv] = Field(
        default_factory=list,
        description="Env vars from Secrets: the store's redisEnv/postgresEnv and each "
        "fallback's apiKeyEnv.",
    )
    allow_from_namespaces: list[str] = Field(
        default_factory=list,
        description="Namespaces whose pods may call the gateway (empty: any namespace).",
    )
    egress_proxy: EgressProxy | None = Field(
        None,
        description="The proxy the gateway reaches upstreams through (hosted APIs from a "
        "cluster without direct egress); pool endpoints stay direct through noProxy.",
    )
    monitoring: GatewayMonitoring = Field(default_factory=lambda: GatewayMonitoring())
    config: GatewayConfig = Field(description="The gateway config (docs/gateway.md).")

    @model_validator(mode="after")
    def _shared_state(self) -> GatewaySpec:
        store = self.config.store
        if not isinstance(store, RedisPostgresStore):
            raise ValueError(
                "config.store: several replicas need {kind: redis-postgres} "
                "(sqlite would give each replica its own budgets and limits)"
            )
        if store.redis is not None or store.postgres is not None:
            raise ValueError(
                "config.store: take the Redis URL and PostgreSQL DSN from Secrets "
                "(redisEnv/postgresEnv plus spec.secrets), not literals"
            )
        needed = {store.redis_env, store.postgres_env} | {
            f.api_key_env for f in self.config.fallbacks if f.api_key_env
        }
        given = {s.env for s in self.secrets}
        missing = sorted(n for n in needed - given if n)
        if missing:
            raise ValueError(f"secrets: no Secret for env var(s) {', '.join(missing)}")
        if self.max_replicas < self.replicas:
            raise ValueError("maxReplicas must be >= replicas")
        self._pods_bypass_the_proxy(given)
        return self

    def _pods_bypass_the_proxy(self, secret_env: set[str]) -> None:
        """Every pool endpoint goes direct, whether the proxy URL is in egressProxy or
        (with credentials) in a Secret; the rule is the gateway's own (ProxySettings)."""
        proxy = self.egress_proxy
        literal = {"https": proxy.https_proxy, "http": proxy.http_proxy} if proxy else {}
        schemes = set()
        for scheme, names in PROXY_ENV.items():
            # ALL_PROXY yields to a scheme's own variable (egress_proxy.from_env): only the
            # scheme's own names conflict with the literal
            if secret_env & set(names) and literal.get(scheme):
                raise ValueError(
                    f"egressProxy: the {scheme} proxy is set both here and in spec.secrets"
                )
            if secret_env & set(proxy_env_names(scheme)) or literal.get(scheme):
                schemes.add(scheme)
        if not schemes:
            return
        if proxy is None:
            raise ValueError(
                "spec.secrets sets a proxy: add egressProxy.noProxy with the pods' domains "
                "(e.g. [.svc, .cluster.local]) so pool traffic stays direct"
            )
        endpoints = ((p.name, e) for p in self.config.pools for e in p.endpoints)
        for pool, endpoint in proxied_endpoints(schemes, ",".join(proxy.no_proxy), endpoints):
            raise ValueError(
                f"egressProxy.noProxy: pool {pool}'s endpoint {endpoint} would go through "
                f"the egress proxy, which cannot reach it; add {urlsplit(endpoint).hostname} "
                "or its domain"
            )


class Gateway(_Spec):
    api_version: Literal["podserve.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["Gateway"]
    metadata: GatewayMetadata
    spec: GatewaySpec


def load_gateway_spec(text: str, source: str = "<spec>") -> Gateway:
    try:
        raw: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{source} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise InvalidInput(f"{source} must be a YAML mapping (a Gateway)")
    try:
        return Gateway.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(spec)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise InvalidInput(f"{source}: {problems}") from exc


def spec_kind(text: str) -> str | None:
    """The `kind` of a YAML document, or None when it has none (for `podserve render`)."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    kind = raw.get("kind") if isinstance(raw, dict) else None
    return kind if isinstance(kind, str) else None
