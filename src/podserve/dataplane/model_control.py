"""Who may change which models this process serves (issue 15 item 4), the same for REST
and gRPC.

Triton's model-control modes (triton-inference-server/server, docs/user_guide/
model_management.md): in `none`, the default, every model in the repository is loaded at
startup and the repository API's load and unload are refused; in `explicit`, they are
allowed. Triton refuses them with "explicit model load / unload is not allowed if
polling is enabled" (core, src/model_repository_manager.cc,
`ModelRepositoryManager::LoadUnloadModel`): older releases as INVALID, current ones as
UNAVAILABLE, which HTTP clients see as a retryable 503. podserve answers 400 /
INVALID_ARGUMENT with the same words, since retrying can never succeed.

`admin_token`: when set, a load or unload must carry it as `Authorization: Bearer
<token>` (gRPC: `authorization` metadata), compared in constant time; otherwise 401 /
UNAUTHENTICATED. (Triton's `--http-restricted-api=model-repository:<key>=<value>` is the
same idea with a header of the operator's choosing.)

A model unloaded this way is not served until it is loaded again, and says so: its
requests get ModelUnloaded (404 / NOT_FOUND, not retryable) instead of ModelNotReady
(503, which clients and load balancers retry). `/ready` stays 200: the pod still serves
its other models, and an operator's unload must not take it out of every load balancer;
`/v2/models/{m}/ready` reports the model.
"""

from __future__ import annotations

import hmac
from typing import Literal

from podserve.core.errors import InvalidInput, ModelUnloaded, Unauthenticated
from podserve.dataplane.types import CallContext

Mode = Literal["none", "explicit"]
NOT_ALLOWED = "explicit model load / unload is not allowed if polling is enabled"


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` value (None when absent)."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class ModelControl:
    def __init__(self, mode: Mode, admin_token: str | None) -> None:
        self.mode = mode
        self._admin_token = admin_token
        self._unloaded: set[str] = set()

    def authorize(self, call: CallContext | None) -> None:
        """Raise unless the call may load or unload a model. `None`: an in-process caller
        of the process itself (tests, the runner), which is trusted."""
        if call is None:
            return
        if self.mode != "explicit":
            raise InvalidInput(
                f"{NOT_ALLOWED} (podserve runs with model_control_mode=none; start it "
                "with --model-control-mode explicit to load and unload through the API)"
            )
        if self._admin_token is None:
            return
        given = call.admin_token or ""
        if not hmac.compare_digest(given.encode(), self._admin_token.encode()):
            raise Unauthenticated(
                "loading and unloading models needs the admin token: send "
                "'Authorization: Bearer <token>'" + (" (the one given is wrong)" if given else "")
            )

    def loaded(self, name: str) -> None:
        self._unloaded.discard(name)

    def unloaded(self, name: str) -> None:
        self._unloaded.add(name)

    def check_served(self, name: str) -> None:
        """Raise ModelUnloaded for a model unloaded on purpose."""
        if name in self._unloaded:
            raise ModelUnloaded(
                f"model {name!r} was unloaded through the repository API and is not "
                f"served until it is loaded again (POST /v2/repository/models/{name}/load)"
            )
