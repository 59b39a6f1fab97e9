"""`render(service)`: a ModelService to every Kubernetes object it needs, in apply order."""

from __future__ import annotations

from dataclasses import dataclass

from podserve.config.model_service import ModelService
from podserve.kube.order import in_apply_order
from podserve.kube.plan import Plan, make_plan
from podserve.kube.render.autoscaling import autoscaler_objects
from podserve.kube.render.batch import batch_objects
from podserve.kube.render.coldstart import headroom_objects, prepull_objects
from podserve.kube.render.consumer import consumer_objects
from podserve.kube.render.evaluation import eval_objects
from podserve.kube.render.monitoring import monitoring_objects
from podserve.kube.render.support import (
    config_map,
    network_policy,
    quota_objects,
    service_account,
    serving_priority_class_object,
)
from podserve.kube.render.traffic import http_route, inference_pool
from podserve.kube.render.variant import variants
from podserve.kube.render.workload import (
    grpc_service,
    headless_service,
    pdb,
    service_object,
    workload,
)
from podserve.kube.types import Manifest

__all__ = ["Rendering", "render"]


@dataclass(frozen=True, slots=True)
class Rendering:
    manifests: tuple[Manifest, ...]
    plan: Plan

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.plan.warnings


def render(service: ModelService) -> Rendering:
    spec = service.spec
    plan = make_plan(spec)
    objects: list[Manifest] = [service_account(service), config_map(service)]
    if spec.priority_class_name is None:
        objects.append(serving_priority_class_object(service))
    if spec.network_policy:
        objects.append(network_policy(service))
    objects += quota_objects(service)
    all_variants = variants(service)
    for variant in all_variants:
        objects.append(workload(service, variant, plan))
        objects.append(service_object(service, variant))
        objects.append(grpc_service(service, variant))
        if spec.workload == "StatefulSet":
            objects.append(headless_service(service, variant))
        objects.append(pdb(service, variant))
        objects += autoscaler_objects(service, variant, plan)
        if spec.inference_pool is not None:
            objects.append(inference_pool(service, variant))
    if spec.gateway is not None:
        objects.append(http_route(service, all_variants))
    objects += monitoring_objects(service)
    objects += batch_objects(service, plan)
    objects += consumer_objects(service, plan)
    objects += eval_objects(service)
    if spec.cold_start.pre_pull and spec.gpu.count:
        objects += prepull_objects(service)
    objects += headroom_objects(service, plan)
    return Rendering(manifests=tuple(in_apply_order(objects)), plan=plan)
