"""Run one gateway replica under uvicorn until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import uvicorn

from podserve.config.egress_proxy import NO_PROXIES, ProxySettings
from podserve.config.gateway_config import GatewayConfig
from podserve.gateway.app import Gateway
from podserve.gateway.edge import gateway_protocol
from podserve.gateway.stores import open_store

log = logging.getLogger("podserve.gateway")


async def serve_gateway(
    config: GatewayConfig,
    host: str,
    port: int,
    env: Mapping[str, str],
    proxies: ProxySettings = NO_PROXIES,
) -> int:
    # Each is set and fit for a header: the CLI refuses to start otherwise
    # (cli/gateway_checks.api_key_problems).
    hosted_keys = {
        fb.name: env.get(fb.api_key_env, "") for fb in config.fallbacks if fb.api_key_env
    }
    gateway = Gateway(config, open_store(config, env, serving=True), hosted_keys, proxies)
    uv_config = uvicorn.Config(
        gateway.asgi(),
        host=host,
        port=port,
        lifespan="on",
        log_config=None,
        access_log=False,
        server_header=False,
        # No X-Forwarded-* rewriting: the gateway reads no client address, and the
        # middleware ran on every request (uvicorn/middleware/proxy_headers.py).
        proxy_headers=False,
        interface="asgi3",
        # Connection bounds (maxConnections, maxHeaderBytes, headerTimeoutS) and one write
        # per response (gateway/edge.py, httpedge/).
        http=gateway_protocol(config),
        limit_concurrency=None,
        # No WebSocket protocol (the gateway serves none): with uvicorn's "auto", any
        # `Upgrade: websocket` request went to the websockets library and got a 500.
        ws="none",
        timeout_graceful_shutdown=5,
        # Longer than a load balancer's idle timeout (AWS ALB: 60 s), so the balancer, not
        # the gateway, closes idle connections: a request sent on a connection the server
        # is closing fails as a reset (uvicorn's default is 5 s).
        timeout_keep_alive=75,
    )
    server = uvicorn.Server(uv_config)
    # Bind first so an ephemeral port is known (and logged) before serving.
    sock = uv_config.bind_socket()
    sock.listen(uv_config.backlog)
    http_port = sock.getsockname()[1]
    log.info("podserve gateway listening", extra={"http_port": http_port})
    await server.serve(sockets=[sock])
    return 0
