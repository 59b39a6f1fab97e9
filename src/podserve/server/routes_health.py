"""Probes and metrics. Each probe answers from the event loop alone, so an answer at all
proves the loop is not blocked; what 200 means is defined in lifecycle.py."""

from __future__ import annotations

from podserve.dataplane import DataPlane, HealthReport
from podserve.server.http import Request, Response, json_response


def _probe(report: HealthReport) -> Response:
    body: dict[str, object] = {"status": "ok" if report.ok else "fail", "state": report.state}
    if report.reasons:
        body["reasons"] = list(report.reasons)
    body.update(report.details)
    return json_response(200 if report.ok else 503, body)


class HealthRoutes:
    def __init__(self, dataplane: DataPlane) -> None:
        self._dataplane = dataplane

    async def startup(self, request: Request) -> Response:
        return _probe(self._dataplane.startup())

    async def live(self, request: Request) -> Response:
        return _probe(self._dataplane.live())

    async def ready(self, request: Request) -> Response:
        return _probe(self._dataplane.ready())

    async def metrics(self, request: Request) -> Response:
        body, content_type = self._dataplane.metrics_exposition()
        return Response(200, body, content_type.encode())
