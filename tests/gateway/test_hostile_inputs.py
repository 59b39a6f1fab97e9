"""Hostile and malformed client input, end to end (a real gateway in front of real pods):
a 4xx (or a documented 503/429) with an OpenAI-shaped JSON error naming the problem, never
a 5xx, a hang, a stalled event loop or a memory blow-up; then the next request is served."""

from __future__ import annotations

import contextlib
import re
import select
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.gateway.conftest import Pods, base_config
from tests.gateway.support import GatewayProcess as GW
from tests.gateway.support import create_key
from tests.support.server import wait_until

MAX_BODY = 4 * 1024 * 1024  # maxBodyBytes and maxBodyBytesInFlight
MAX_IN_FLIGHT = 16
HEADER_TIMEOUT_S = 2.0
CHAT, COMPLETIONS, EMBEDDINGS = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"
IRIS = "/v2/models/iris/infer"
IRIS_ROW = [5.1, 3.5, 1.4, 0.2]
IRIS_INPUT = {"name": "features", "shape": [1, 4], "datatype": "FP32", "data": IRIS_ROW}
IRIS_BODY = {"inputs": [IRIS_INPUT]}
ENV = {"HOSTED_API_KEY": "sk-hosted-test"}
USER = {"role": "user", "content": "hi"}


@pytest.fixture(scope="module")
def gateway(pods: Pods, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GW]:
    limits = {"maxBodyBytes": MAX_BODY, "maxBodyBytesInFlight": MAX_BODY}
    config = base_config(
        pods,
        **limits,
        maxInFlight=MAX_IN_FLIGHT,
        headerTimeoutS=HEADER_TIMEOUT_S,
        bodyTimeoutS=HEADER_TIMEOUT_S,
    )
    with GW(config, tmp_path_factory.mktemp("gw-hostile"), env=ENV) as gw:
        yield gw


@pytest.fixture(scope="module")
def key(gateway: GW) -> str:
    return create_key(gateway.config_path, "--team", "hostile")


def post(gw: GW, key: str, path: str, body: Any, **headers: str) -> httpx.Response:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    headers["authorization"] = f"Bearer {key}"
    with httpx.Client(base_url=gw.url, timeout=60) as http:
        return http.post(path, content=content, headers=headers)


def error_of(status: int, body: bytes, oip: bool = False) -> str:
    """The message of an OpenAI-shaped error (oip: or the pod's OIP {"error": "..."})."""
    assert 400 <= status < 500, (status, body[:300])
    error = orjson.loads(body)["error"]
    if oip and isinstance(error, str):
        return error
    assert {"message", "type", "param", "code"} <= set(error), body[:300]
    return str(error["message"])


def healthy(gw: GW, key: str) -> None:
    """Alive, /healthz answered quickly, the next valid request served, nothing crashed."""
    assert gw.proc is not None
    assert gw.proc.poll() is None
    started = time.perf_counter()
    assert gw.get("/healthz").status_code == 200
    assert time.perf_counter() - started < 1.0
    reply = post(gw, key, COMPLETIONS, {"model": "tiny-lm", "prompt": "ok", "max_tokens": 1})
    assert reply.status_code == 200, reply.text
    crashed = [r for r in gw.logs if r.get("level") in ("error", "critical")]
    assert not crashed, crashed[:3]


def short(value: object) -> str:
    """A test id: the request without what every case shares."""
    if isinstance(value, dict):
        shared = {k: repr(v) for k, v in {**chat(), **completion()}.items()}
        value = {k: v for k, v in value.items() if repr(v) != shared.get(k)}
    if isinstance(value, bytes):
        value = re.sub(rb" HTTP/1.1\r\nhost: gw\r\n(content-length: \d+\r\n)?", b" ", value)
    return repr(value)[:60]


def connect(gw: GW) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gw.http_port), timeout=10)


def read_response(sock: socket.socket, data: bytes = b"") -> tuple[int, str, bytes, bytes]:
    while True:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if sep:
            lines = head.decode("latin-1").lower().split("\r\n")
            fields = {k.strip(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
            length = int(fields.get("content-length", "-1"))
            if 0 <= length <= len(rest):
                status = int(lines[0].split()[1])
                return status, fields.get("content-type", ""), rest[:length], rest[length:]
        chunk = sock.recv(1 << 16)  # TimeoutError: no answer
        assert chunk, f"connection closed without a whole response: {data[:300]!r}"
        data += chunk


def exchange(gw: GW, raw: bytes) -> tuple[int, str, bytes]:
    with connect(gw) as sock:
        sock.sendall(raw)
        return read_response(sock)[:3]


def request(path: str, key: str | None, body: bytes = b"", extra: bytes = b"") -> bytes:
    auth = b"" if key is None else f"authorization: Bearer {key}\r\n".encode()
    head = f"POST {path} HTTP/1.1\r\nhost: gw\r\ncontent-length: {len(body)}\r\n".encode()
    return head + auth + extra + b"\r\n" + body


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "tiny-lm", "messages": [USER], "max_tokens": 2, **fields}


def completion(**fields: Any) -> dict[str, Any]:
    return {"model": "tiny-lm", "prompt": "x", "max_tokens": 2, **fields}


def iris(**fields: Any) -> dict[str, Any]:
    return {"inputs": [{**IRIS_INPUT, **fields}]}


HEAD = b'{"model":"tiny-lm","messages":[{"role":"user","content":"x"}],'
NEST = b"[" * 100_000 + b"]" * 100_000
BAD_OPTIONS = ("x", [1], {"include_usage": "yes"})
BAD_PROMPTS: tuple[object, ...] = (
    [],
    {"a": 1},
    [1.5],
    [[[1]]],
    [1, 2, 3],
    [[1, 2], [3]],
    ["a", 1],
    None,
)
BAD_BODIES = [
    *((CHAT, raw, "JSON") for raw in (b"{nope", b"", b"\xef\xbb\xbf{}", b"{} x", NEST)),
    *((CHAT, raw, "object") for raw in (b"[1, 2]", b"null", b'"x"')),
    (CHAT, HEAD + b'"x":"a\\ud800b"}', "JSON"),  # a lone surrogate
    (CHAT, HEAD + b'"x":"a\xff\xfeb"}', "JSON"),  # not UTF-8
    (CHAT, HEAD + b'"x":' + NEST + b"}", "JSON"),
    (CHAT, HEAD + b'"temperature":1e400}', "JSON"),
    (CHAT, HEAD + b'"max_tokens":' + b"9" * 5000 + b"}", "JSON"),
    (CHAT, {"messages": [USER]}, "model"),
    *((CHAT, chat(model=v), "model") for v in (5, ["tiny-lm"], None)),
    (CHAT, chat(model="m" * 100_000), "not served"),
    *((CHAT, chat(messages=v), "message") for v in ("hi", ["hi"], [], {"role": "user"})),
    (CHAT, chat(messages=[{"role": "user", "content": 5}]), "content"),
    (CHAT, chat(messages=[{"role": "user", "content": [5, None, {"type": "x"}]}]), "content"),
    (CHAT, chat(messages=[{"role": 5, "content": "x"}]), "role"),
    *((CHAT, chat(max_tokens=v), "max_tokens") for v in (-1, 0, 2.5, 2.0, True, "5")),
    *((CHAT, chat(max_completion_tokens=v), "max_completion_tokens") for v in (0, "3", 1.5)),
    *((CHAT, chat(n=v), "'n'") for v in ("2", 0, True, 129, 10**19)),
    *((CHAT, chat(stream=v), "stream") for v in ("true", 1)),
    # The pod refuses these (its StreamOptions is strict): the gateway must not rewrite
    # them into a valid {"include_usage": true} and so accept what the upstream refuses.
    *((CHAT, chat(stream=True, stream_options=v), "stream_options") for v in BAD_OPTIONS),
    *((COMPLETIONS, completion(prompt=v), "prompt") for v in BAD_PROMPTS),
    *((EMBEDDINGS, {"model": "minilm", "input": v}, "input") for v in ({"a": 1}, [1, 2], 5)),
    # OIP v2: forwarded byte for byte; the pod's 400s (OIP-shaped) come back.
    *((IRIS, raw, needle) for raw, needle in ((b"{nope", "JSON"), (b"[]", "object"))),
    *((IRIS, body, "inputs") for body in ({"inputs": {"a": 1}}, {})),
    (IRIS, iris(datatype="INT8"), "INT8"),
    (IRIS, iris(datatype="FOO"), "datatype"),
    *((IRIS, iris(shape=v), "shape") for v in ([2, 4], [-1, 4], "1,4")),
    (IRIS, iris(shape=[2**31, 2**31, 2**31]), "too large"),
    (IRIS, iris(data=["a", "b", "c", "d"]), "FP32"),
]


@pytest.mark.parametrize(("path", "body", "needle"), BAD_BODIES, ids=short)
def test_bad_bodies(gateway: GW, key: str, path: str, body: Any, needle: str) -> None:
    """A 4xx naming the problem (what the gateway reads, or the pod's own refusal)."""
    reply = post(gateway, key, path, body)
    message = error_of(reply.status_code, reply.content, oip=path == IRIS)
    assert needle in message, reply.text[:300]
    healthy(gateway, key)


# --- the OIP binary extension: its header is part of the request and of the response -----
def test_binary_tensors_pass_through(gateway: GW, key: str) -> None:
    tensor = {k: v for k, v in IRIS_INPUT.items() if k != "data"}
    header = orjson.dumps({"inputs": [{**tensor, "parameters": {"binary_data_size": 16}}]})
    body = header + struct.pack("<4f", *IRIS_ROW)
    sizes = {"inference-header-content-length": str(len(header))}
    reply = post(gateway, key, IRIS, body, **sizes, **{"content-type": "application/octet-stream"})
    assert reply.status_code == 200, reply.text
    assert orjson.loads(reply.content)["outputs"][0]["data"] == [0]
    asked = {**IRIS_BODY, "outputs": [{"name": "label", "parameters": {"binary_data": True}}]}
    binary = post(gateway, key, IRIS, asked)
    assert binary.status_code == 200, binary.text
    # Without it the client cannot tell where the JSON ends and the tensor bytes begin.
    assert binary.headers.get("inference-header-content-length"), binary.headers
    for bogus in ("abc", "-5", "99999"):  # the pod refuses each with a 400 naming it
        reply = post(gateway, key, IRIS, IRIS_BODY, **{"inference-header-content-length": bogus})
        assert "Inference-Header" in error_of(reply.status_code, reply.content, oip=True)


# --- paths, headers, HTTP itself (raw sockets) ---------------------------------------------
GENERATE = {"text_input": "The function returns", "parameters": {"max_tokens": 40}}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v2/models/iris/versions/1%3Fx/infer", IRIS_BODY),
        ("/v2/models/tiny-lm/versions/1%252Fgenerate%3F/infer", GENERATE),
    ],
)
def test_the_pod_runs_the_route_admitted(gateway: GW, key: str, path: str, body: Any) -> None:
    """The gateway routes on the percent-decoded path, then sends that decoded path
    upstream, where "?" starts a query and "%2F" (sent as %252F) is a "/": the pod runs
    another route than the one admitted. `1%3Fx` reached the pod's metadata route (405);
    `1%252Fgenerate%3F` runs the pod's text generation, admitted as an OIP infer call
    and so never billed, whatever its max_tokens. The version must stay one segment."""
    status, _, reply = exchange(gateway, request(path, key, orjson.dumps(body)))
    assert status in (400, 404), reply[:300]  # no such version
    error_of(status, reply, oip=True)


TE = b"transfer-encoding: chunked\r\n"
BODY = orjson.dumps(completion())
AUTH = b"authorization: Bearer "
BAD_PATHS = "/v2/models/..%2F..%2Fv1%2Fcompletions/infer /v2/models/iris%2F..%2Firis/infer"
AUTHS = [b"", b"authorization: \r\n", AUTH[:-1] + b"\r\n", AUTH + b"\r\n", AUTH + b"\xe9\xff\r\n"]
AUTHS += [b"authorization: Basic YTpi\r\n", AUTH + b"a" * 30_000 + b"\r\n"]
CHUNKED = b"POST /v1/completions HTTP/1.1\r\nhost: gw\r\n" + TE
HTTP_CASES = [
    *((request(p, "psk-x", BODY), 404) for p in BAD_PATHS.split()),
    (request("/v2/models/" + "m" * 20_000 + "/infer", "psk-x", BODY), 401),
    *((request(CHAT, None, BODY, extra), 401) for extra in AUTHS),
    (request(CHAT, None, BODY, AUTH + "psk-é中\r\n".encode()), 401),
    (request(CHAT, None, BODY, AUTH + b"a" * 40_000 + b"\r\n"), 431),
    # llhttp refuses these; uvicorn answers text/plain "Invalid HTTP request received."
    *((request(CHAT, None, BODY, AUTH + v + b"\r\n"), 400) for v in (b"a\x00b", b"a\x7fb")),
    *((CHUNKED + b"\r\n" + size + b"\r\n" + BODY, 400) for size in (b"zz", b"-5", b"f" * 20)),
    (CHUNKED + b"content-length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400),
    (request(COMPLETIONS, None, BODY).replace(b"length: ", b"length: -"), 400),
    (request(COMPLETIONS, None, BODY, b"content-length: 3\r\n"), 400),
    *((raw + b" HTTP/1.1\r\nhost: gw\r\n\r\n", 400) for raw in (b"GET /v2/\xff", b"GARBAGE")),
    (b"GET /healthz HTTP/9.9\r\n\r\n", 400),
    (b"GET /healthz HTTP/1.1\r\nhost: gw\r\nbad header: 1\r\n\r\n", 400),
    # The gateway decodes no content coding: gzip was read as JSON (a 400 saying "not
    # JSON"), and an OIP body went on to the pod without its Content-Encoding.
    *(
        (request(path, "psk-x", BODY, b"content-encoding: gzip\r\n"), 415)
        for path in (COMPLETIONS, "/v2/models/iris/infer")
    ),
]


def head_fields(gw: GW, raw: bytes) -> dict[str, str]:
    """The response head's fields, lower-cased, for `raw` sent on its own connection."""
    with connect(gw) as sock:
        sock.sendall(raw)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(1 << 16)
            assert chunk, f"connection closed without a response head: {data[:300]!r}"
            data += chunk
    lines = data.partition(b"\r\n\r\n")[0].decode("latin-1").lower().split("\r\n")
    return {k.strip(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}


@pytest.mark.parametrize(("raw", "status"), HTTP_CASES, ids=short)
def test_raw_http_gets_a_json_4xx(gateway: GW, key: str, raw: bytes, status: int) -> None:
    got, content_type, body = exchange(gateway, raw)
    assert got == status, body[:300]
    assert content_type.startswith("application/json"), body[:300]
    error_of(got, body, oip=raw.split(b" ", 2)[1].startswith(b"/v2"))
    # every response carries the overhead header (docs/gateway.md), refusals of the
    # HTTP itself too: they had none
    assert float(head_fields(gateway, raw)["x-podserve-gateway-overhead-ms"]) >= 0
    healthy(gateway, key)


def test_pipelined_requests_are_answered_in_order(gateway: GW, key: str) -> None:
    one = request(COMPLETIONS, key, BODY)
    healthz = b"GET /healthz HTTP/1.1\r\nhost: gw\r\n\r\n"
    statuses, left = [], b""
    with connect(gateway) as sock:
        sock.sendall(one + request(COMPLETIONS, key, b"{nope") + one + healthz)
        for _ in range(4):
            status, _, _, left = read_response(sock, left)
            statuses.append(status)
    assert statuses == [200, 400, 200, 200]


@pytest.mark.parametrize("part", ["headers", "body"])
def test_a_slow_client_gets_a_json_408(gateway: GW, key: str, part: str) -> None:
    """headerTimeoutS and bodyTimeoutS are the slow-loris defences: a request trickled a
    byte every 0.2 s does not hold its place in maxInFlight and its bytes in
    maxBodyBytesInFlight for as long as the client likes."""
    start, more = b"GET /healthz HTTP/1.1\r\n", b"x-a: b\r\n"
    if part == "body":
        start, more = request(COMPLETIONS, key, b" " * 1000)[:-1000], b" "
    with connect(gateway) as sock:
        sock.sendall(start)
        started = time.monotonic()
        while not select.select([sock], [], [], 0.2)[0]:
            assert time.monotonic() - started < HEADER_TIMEOUT_S * 3, "never refused"
            sock.sendall(more)
        status, _, body, _ = read_response(sock)
    assert status == 408
    error_of(status, body)


def stalled(gw: GW, key: str, sent: bytes, chunked: bool = False) -> socket.socket:
    sock = connect(gw)
    length = TE if chunked else f"content-length: {len(BODY)}\r\n".encode()
    head = f"POST {COMPLETIONS} HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {key}\r\n"
    with contextlib.suppress(OSError):  # refused while sending
        sock.sendall(head.encode() + length + b"\r\n" + sent)
    return sock


def test_past_max_in_flight_the_refusal_is_fast(gateway: GW, key: str) -> None:
    held = [stalled(gateway, key, b"{") for _ in range(MAX_IN_FLIGHT)]
    wait_until(lambda: post(gateway, key, COMPLETIONS, b"{}").status_code == 503, 10, "503")
    reply = post(gateway, key, COMPLETIONS, BODY)
    for sock in held:
        sock.close()
    assert (reply.status_code, reply.headers["retry-after"]) == (503, "1")
    assert reply.json()["error"]["code"] == "overloaded"
    wait_until(lambda: post(gateway, key, COMPLETIONS, BODY).status_code == 200, 10, "released")
    healthy(gateway, key)


def test_chunked_bodies_count_among_the_bytes_in_flight(gateway: GW, key: str) -> None:
    """Two chunked uploads of 3 MiB each, stalled before their last chunk, hold 6 MiB
    against maxBodyBytesInFlight = 4 MiB: one of them, or the next request, is refused."""
    piece = b"x" * (3 * 1024 * 1024)
    chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    socks = [stalled(gateway, key, chunk, chunked=True) for _ in range(2)]

    def refused() -> bool:  # an upload answered 503, or the next request (not JSON) is
        # (bodyTimeoutS would answer a stalled upload too, with 408: only a 503 counts)
        for sock in select.select(socks, [], [], 0)[0]:
            return read_response(sock)[0] == 503
        return post(gateway, key, COMPLETIONS, b"x" * 1_000_000).status_code == 503

    try:
        wait_until(refused, 10, "a refusal past maxBodyBytesInFlight")
    finally:
        for sock in socks:
            sock.close()
    healthy(gateway, key)


def test_abandoned_streams_are_settled_and_released(gateway: GW) -> None:
    key = create_key(gateway.config_path, "--team", "streams")
    raw = request(COMPLETIONS, key, orjson.dumps(completion(max_tokens=64, stream=True)))
    for i in range(2 * MAX_IN_FLIGHT):  # more than maxInFlight: a leaked place shows
        with connect(gateway) as sock:
            sock.sendall(raw)
            if i % 2:
                sock.recv(100)  # the stream began: admitted, so it must be settled
    settled = {"team": "streams", "code": "200", "model": "tiny-lm"}
    metric = "podserve_gateway_requests_total"
    wait_until(lambda: gateway.metric(metric, settled) >= MAX_IN_FLIGHT, 20, "all settled")
    healthy(gateway, key)


# --- the event loop and memory ------------------------------------------------------------
def test_a_long_prompt_does_not_take_hundreds_of_mb(gateway: GW, key: str) -> None:
    """A 1 MB prompt (the default maxBodyBytes takes 16) is tokenized whole on the
    counting thread: about 200 MB for 1 M characters, 730 MB for 4 M, past the rendered
    Deployment's 512Mi. (The first big request here: the high-water mark only rises.)"""
    assert gateway.proc is not None
    status = Path(f"/proc/{gateway.proc.pid}/status")
    before = int(status.read_text().split("VmHWM:")[1].split()[0])
    prompt = ("hello world " * 90_000)[:1_000_000]
    reply = post(gateway, key, COMPLETIONS, completion(prompt=prompt, max_tokens=1))
    assert reply.status_code == 400, reply.text[:300]  # over the pod's 512-token context
    grown_kb = int(status.read_text().split("VmHWM:")[1].split()[0]) - before
    assert grown_kb < 100 * 1024, f"the gateway's peak memory grew {grown_kb // 1024} MB"


SIZE = 2 * 1024 * 1024
PROMPTS, MESSAGES = b'{"model":"tiny-lm","prompt":[', b'{"model":"tiny-lm","messages":['
LOOP_BODIES = {
    # 700 K texts of 0 characters are tokenized on the loop (INLINE_CHARS counts
    # characters, not texts): over a second (a 16 MiB body: 13 s and 4.6 GB).
    "empty strings": (COMPLETIONS, PROMPTS + b'"",' * (SIZE // 3) + b'""]}'),
    "empty messages": (CHAT, MESSAGES + b"{}," * (SIZE // 3) + b"{}]}"),
    # 1 M lists parsed and walked on the loop (16 MiB: 3 s), refused at the last item.
    "nested ids": (COMPLETIONS, PROMPTS + b"[1]," * (MAX_BODY // 4 - 20) + b"{}]}"),
}


@pytest.mark.parametrize("case", sorted(LOOP_BODIES))
def test_a_pathological_big_body_is_refused_and_the_gateway_stays_healthy(
    gateway: GW, key: str, case: str
) -> None:
    """That the work runs off the event loop is shown without timing, in
    test_big_requests.py (a gate holds the parse and the count while /healthz answers)."""
    path, body = LOOP_BODIES[case]
    assert 400 <= post(gateway, key, path, body).status_code < 500
    healthy(gateway, key)


def test_an_unknown_model_name_is_not_echoed_whole(gateway: GW, key: str) -> None:
    reply = post(gateway, key, COMPLETIONS, completion(model="m" * 1_000_000))
    assert reply.status_code == 404
    message = error_of(reply.status_code, reply.content)
    assert "(1000000 characters)" in message
    assert len(reply.content) < 1024
