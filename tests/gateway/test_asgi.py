"""The bare ASGI edge in process: the route table, and a handler's crash answered as a JSON
500 (the proxied routes run against real pods in test_proxy)."""

from __future__ import annotations

import json

from podserve.gateway.asgi import App, Call, Message, Reply, Routes
from podserve.gateway.wire import error_type


async def _ok(_call: Call) -> Reply:
    return Reply(200, b"{}")


def test_routes_match_exact_paths_and_the_v2_shapes() -> None:
    routes = Routes()
    routes.add("GET", "/healthz", _ok)
    routes.add_v2("GET", "", _ok)
    routes.add_v2("GET", "ready", _ok)
    routes.add_v2("POST", "infer", _ok)
    routes.add_v2("GET", "versions/", _ok)
    routes.add_v2("GET", "versions/ready", _ok)
    routes.add_v2("POST", "versions/infer", _ok)
    assert routes.match("/healthz") == ({"GET": _ok}, {})
    for tail, methods in (("", {"GET": _ok}), ("/ready", {"GET": _ok}), ("/infer", {"POST": _ok})):
        path = f"/v2/models/iris{tail}"
        assert routes.match(path) == (methods, {"model": "iris", "path": path})
        # the versioned routes too (tritonclient's `model_version=`), version kept in the path
        path = f"/v2/models/iris/versions/2{tail}"
        assert routes.match(path) == (methods, {"model": "iris", "version": "2", "path": path})
    # the forwarded path: each segment percent-encoded whole, as it was matched (the ASGI
    # path is decoded once already; the pod decodes once more)
    matched = routes.match("/v2/models/a b/versions/1%2Fgenerate?/infer")
    assert matched is not None
    assert matched[1]["version"] == "1%2Fgenerate?"
    assert matched[1]["path"] == "/v2/models/a%20b/versions/1%252Fgenerate%3F/infer"
    for path in (
        "/nope",
        "/v2/models/",
        "/v2/models//infer",
        "/v2/models/iris/bogus",
        "/v2/models/iris/versions//infer",
        "/v2/models/iris/versions",
        "/v2/models/iris/versions/2/bogus",
        "/v2/models/iris/versions/2/infer/more",
        "/v2/models/iris/infer/more",
    ):
        assert routes.match(path) is None, path


async def test_a_crashing_handler_is_a_json_500() -> None:
    async def broken(_call: Call) -> Reply:
        raise ValueError("bug")

    async def never() -> None:
        raise AssertionError("not called")

    routes = Routes()
    routes.add("POST", "/x", broken)
    app = App(routes, never, never)
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/x", "headers": []}
    await app(scope, receive, send)
    assert sent[0]["status"] == 500
    error = json.loads(sent[1]["body"])["error"]
    assert error["message"] == "internal gateway error"
    # the gateway's own fault, not the client's: OpenAI's type for its 500s
    assert error["type"] == "server_error"


async def test_the_edges_refusals_carry_the_type_of_their_status() -> None:
    """The route table's own 404 and 405 are the client's errors, its 500 the gateway's;
    every status maps as the gateway's refusals do (docs/gateway.md, the error table)."""

    async def never() -> None:
        raise AssertionError("not called")

    routes = Routes()
    routes.add("POST", "/x", _ok)
    app = App(routes, never, never)

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    for method, path in (("POST", "/nope"), ("GET", "/x")):
        await app({"type": "http", "method": method, "path": path, "headers": []}, receive, send)
    assert [m["status"] for m in sent[::2]] == [404, 405]
    assert {json.loads(m["body"])["error"]["type"] for m in sent[1::2]} == {"invalid_request_error"}
    expected = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "invalid_request_error",
        413: "invalid_request_error",
        422: "invalid_request_error",
        500: "server_error",
        502: "service_unavailable",
        503: "service_unavailable",
        504: "service_unavailable",
    }
    assert {status: error_type(status).value for status in expected} == expected


async def test_a_reply_that_cannot_be_sent_is_still_settled() -> None:
    """`after` (the settlement) runs when sending fails: the upstream did the work, and a
    hold left unsettled is charged in full when its lease runs out."""
    settled: list[bool] = []

    async def settle() -> None:
        settled.append(True)

    async def answered(_call: Call) -> Reply:
        return Reply(799, b"{}", after=settle)

    async def never() -> None:
        raise AssertionError("not called")

    routes = Routes()
    routes.add("POST", "/x", answered)
    app = App(routes, never, never)

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    sent: list[Message] = []

    async def send(message: Message) -> None:
        if message.get("status") == 799:
            raise KeyError(799)  # uvicorn's, for a status it has no line for
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/x", "headers": []}
    await app(scope, receive, send)
    assert settled == [True]
    assert sent[0]["status"] == 500
