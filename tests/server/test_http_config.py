"""The pod's uvicorn settings: the ASGI app is served as it is, with no middleware
uvicorn would otherwise wrap around every request."""

from __future__ import annotations

from pathlib import Path

from podserve.config.settings import ServerSettings
from podserve.server.runner import http_config


def test_the_app_is_not_wrapped_in_proxy_headers_middleware(tmp_path: Path) -> None:
    """Nothing in the pod reads the client's address, so X-Forwarded-* rewriting would
    only cost every request a wrapper (uvicorn's `proxy_headers` defaults to on)."""

    async def app(scope: object, receive: object, send: object) -> None:
        del scope, receive, send

    config = http_config(ServerSettings(model_repository=tmp_path), app)  # type: ignore[arg-type]
    config.load()
    assert config.loaded_app is app
