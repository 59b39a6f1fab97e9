"""The gateway in front of a real pod, with the openai SDK as the client (SQLite store):
OpenAI and OIP v2 routes, SSE passthrough, the usage chunk, keys, errors, metrics, spend."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families

from podserve.config.gateway_fields import MAX_OUTPUT_TOKENS
from tests.gateway.conftest import Pods, base_config
from tests.gateway.support import GatewayProcess, chat, create_key, run_cli
from tests.support.server import wait_until

HOSTED_ENV = {"HOSTED_API_KEY": "sk-hosted-test"}


@pytest.fixture(scope="module")
def gateway(pods: Pods, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    workdir = tmp_path_factory.mktemp("gw-proxy")
    config = base_config(pods, namespaces={"team-a": {"budgetUsd": 100}}, maxBodyBytes=65536)
    with GatewayProcess(config, workdir, env=HOSTED_ENV) as process:
        yield process


@pytest.fixture(scope="module")
def key(gateway: GatewayProcess) -> str:
    return create_key(gateway.config_path, "--team", "search", "--namespace", "team-a")


@pytest.fixture
def client(gateway: GatewayProcess, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)


def test_chat_through_the_gateway_matches_the_pod(client: openai.OpenAI, pods: Pods) -> None:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "What does json.dumps do?"}
    ]
    raw = client.chat.completions.with_raw_response.create(
        model="tiny-lm", messages=messages, max_tokens=12, temperature=0
    )
    via = raw.parse()
    direct = openai.OpenAI(base_url=f"{pods.a.url}/v1", api_key="x", max_retries=0)
    same = direct.chat.completions.create(
        model="tiny-lm", messages=messages, max_tokens=12, temperature=0
    )
    assert via.choices[0].message.content == same.choices[0].message.content
    assert via.usage is not None
    assert same.usage is not None
    assert via.usage.completion_tokens == same.usage.completion_tokens
    assert float(raw.headers["x-podserve-gateway-overhead-ms"]) >= 0
    assert raw.headers["x-podserve-gateway-upstream"] == "chat"


def test_stream_passes_through_and_strips_the_usage_chunk(client: openai.OpenAI) -> None:
    chunks = list(
        client.completions.create(
            model="tiny-lm",
            prompt="The function returns",
            max_tokens=8,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True},
        )
    )
    # The gateway forced include_usage upstream; the client did not ask, so no usage chunk.
    assert all(c.usage is None for c in chunks)
    assert sum(1 for c in chunks if c.choices) == 8  # one token per chunk
    with_usage = list(
        client.completions.create(
            model="tiny-lm",
            prompt="The function returns",
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    assert with_usage[-1].usage is not None
    assert with_usage[-1].usage.completion_tokens == 8
    assert with_usage[-1].usage.prompt_tokens == 3


def test_chat_stream_with_the_sdk(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="tiny-lm",
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=6,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text


def test_models_lists_what_the_key_may_use(client: openai.OpenAI, gateway: GatewayProcess) -> None:
    assert sorted(m.id for m in client.models.list()) == ["iris", "minilm", "tiny-lm"]
    limited = create_key(gateway.config_path, "--models", "iris")
    only = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=limited, max_retries=0)
    assert [m.id for m in only.models.list()] == ["iris"]
    with pytest.raises(openai.PermissionDeniedError):
        only.completions.create(model="tiny-lm", prompt="x", max_tokens=1)


def test_models_retrieve_gives_what_the_list_gives(
    client: openai.OpenAI, gateway: GatewayProcess
) -> None:
    """The SDK's `models.retrieve` (`GET /v1/models/{id}`) was a 404 "no route"."""
    listed = {m.id: m for m in client.models.list()}
    assert client.models.retrieve("tiny-lm") == listed["tiny-lm"]
    limited = create_key(gateway.config_path, "--models", "iris")
    only = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=limited, max_retries=0)
    for model_id, who in (("nope", client), ("org/nope", client), ("tiny-lm", only)):
        with pytest.raises(openai.NotFoundError) as missing:
            who.models.retrieve(model_id)
        assert missing.value.code == "unknown_model"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(
            base_url=f"{gateway.url}/v1", api_key="psk-no", max_retries=0
        ).models.retrieve("tiny-lm")


def test_embeddings_are_proxied_and_billed_for_input(
    client: openai.OpenAI, gateway: GatewayProcess
) -> None:
    raw = client.embeddings.with_raw_response.create(
        model="minilm", input=["a function returns", "a list"]
    )
    assert raw.headers["x-podserve-gateway-upstream"] == "embed"
    result = raw.parse()
    assert [len(d.embedding) for d in result.data] == [384, 384]
    assert result.usage.prompt_tokens > 0

    def billed() -> float:  # settled just after the response is sent
        return sum(
            v
            for (n, labels), v in _samples(gateway).items()
            if n == "podserve_gateway_tokens_total" and ("model", "minilm") in labels
        )

    wait_until(lambda: billed() >= result.usage.prompt_tokens, timeout_s=10, what="billing")


def test_oip_v2_infer_is_proxied(gateway: GatewayProcess, key: str) -> None:
    body = {
        "inputs": [
            {"name": "features", "shape": [1, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2]}
        ]
    }
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        reply = http.post(
            "/v2/models/iris/infer", json=body, headers={"authorization": f"Bearer {key}"}
        )
        unauth = http.post("/v2/models/iris/infer", json=body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["outputs"][0]["name"]
    assert "x-podserve-gateway-overhead-ms" in reply.headers
    assert unauth.status_code == 401


def test_oip_v2_metadata_is_passed_through(gateway: GatewayProcess, key: str) -> None:
    auth = {"authorization": f"Bearer {key}"}
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        meta = http.get("/v2/models/iris", headers=auth)
        ready = http.get("/v2/models/iris/ready", headers=auth)
        unknown = http.get("/v2/models/nope", headers=auth)
        anonymous = http.get("/v2/models/iris")
    assert meta.status_code == 200
    assert meta.json()["name"] == "iris"
    # proxied, so it names its upstream as every proxied reply does
    assert meta.headers["x-podserve-gateway-upstream"] == "chat"
    assert ready.headers["x-podserve-gateway-upstream"] == "chat"
    assert ready.status_code == 200
    assert unknown.status_code == 404
    assert anonymous.status_code == 401


@pytest.mark.parametrize("header", [None, "Bearer psk-not-a-key", "Basic abc"])
def test_bad_keys_get_openai_style_401(gateway: GatewayProcess, header: str | None) -> None:
    headers = {} if header is None else {"authorization": header}
    with httpx.Client(base_url=gateway.url) as http:
        reply = http.post(
            "/v1/completions", json={"model": "tiny-lm", "prompt": "x"}, headers=headers
        )
    assert reply.status_code == 401
    error = reply.json()["error"]
    assert error["type"] == "authentication_error"
    assert error["message"]
    assert "x-podserve-gateway-overhead-ms" in reply.headers


def test_revoked_and_expired_keys_are_refused(gateway: GatewayProcess) -> None:
    key = create_key(gateway.config_path, "--team", "t")
    listed = json.loads(gateway.cli("keys", "list", "--format", "json").stdout)
    key_id = next(r["key_id"] for r in listed if r["team"] == "t")
    assert key not in json.dumps(listed)  # keys are never shown again
    assert (
        chat(
            gateway, key, model="tiny-lm", messages=[{"role": "user", "content": "a"}], max_tokens=1
        ).status_code
        == 200
    )
    assert gateway.cli("keys", "revoke", key_id).returncode == 0

    def refused() -> bool:  # the key cache holds a key for keyCacheS (1 s)
        return (
            chat(
                gateway,
                key,
                model="tiny-lm",
                messages=[{"role": "user", "content": "a"}],
                max_tokens=1,
            ).status_code
            == 401
        )

    wait_until(refused, timeout_s=10, what="revocation")
    # the CLI takes more than 0 days: a key that lives 0.1 s (1e-6 days), then is refused
    expired = create_key(gateway.config_path, "--expires-in-days", "0.000001")
    replies: list[httpx.Response] = []

    def expired_refused() -> bool:
        messages = [{"role": "user", "content": "a"}]
        replies.append(chat(gateway, expired, model="tiny-lm", messages=messages, max_tokens=1))
        return replies[-1].status_code == 401

    wait_until(expired_refused, timeout_s=10, what="expiry")
    assert "expired" in replies[-1].json()["error"]["message"]


def test_a_rotated_key_keeps_its_id_and_spend_and_its_old_secret_for_the_grace(
    gateway: GatewayProcess,
) -> None:
    key = create_key(gateway.config_path, "--team", "rotating", "--budget-usd", "1")
    listed = json.loads(gateway.cli("keys", "list", "--format", "json").stdout)
    key_id = next(r["key_id"] for r in listed if r["team"] == "rotating")

    def status(secret: str) -> int:
        messages = [{"role": "user", "content": "a"}]
        return chat(gateway, secret, model="tiny-lm", messages=messages, max_tokens=1).status_code

    assert status(key) == 200
    rotated = gateway.cli("keys", "rotate", key_id, "--grace-s", "60")
    assert rotated.returncode == 0, rotated.stderr
    second = rotated.stdout.strip().splitlines()[-1]
    assert second.startswith("psk-")
    assert second != key
    assert "keeps working for 60 s" in rotated.stdout
    assert status(second) == 200
    assert status(key) == 200  # within its grace

    def one_key_three_requests() -> bool:
        rows = json.loads(gateway.cli("spend", "--by", "key", "--format", "json").stdout)
        return [r["requests"] for r in rows if r["key"] == key_id] == [3]

    wait_until(one_key_three_requests, timeout_s=10, what="three requests billed to one key")
    again = gateway.cli("keys", "rotate", key_id)  # no grace: only the newest works
    assert again.returncode == 0, again.stderr
    third = again.stdout.strip().splitlines()[-1]
    wait_until(lambda: status(second) == 401, timeout_s=10, what="the rotated-out secret refused")
    # the secret just rotated out is refused as expired (the doc's word), not unknown
    refused = chat(gateway, second, model="tiny-lm", messages=[{"role": "user", "content": "a"}])
    assert "expired" in refused.json()["error"]["message"], refused.text
    assert status(key) == 401
    assert status(third) == 200
    assert [
        r["key_id"]
        for r in json.loads(gateway.cli("keys", "list", "--format", "json").stdout)
        if r["team"] == "rotating"
    ] == [key_id]
    missing = gateway.cli("keys", "rotate", "nope")
    assert missing.returncode == 1
    assert "no active key with id nope" in missing.stderr


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"messages": [{"role": "user", "content": "a"}]}, "model"),
        ({"model": "tiny-lm", "messages": []}, "messages"),
        (
            {"model": "tiny-lm", "messages": [{"role": "user", "content": "a"}], "max_tokens": -3},
            "max_tokens",
        ),
        ({"model": "nope", "messages": [{"role": "user", "content": "a"}]}, "nope"),
        # 10**19 choices made SQLite raise OverflowError (a 500) before `n` was bounded
        ({"model": "tiny-lm", "messages": [{"role": "user", "content": "a"}], "n": 10**19}, "'n'"),
        ({"model": "tiny-lm", "messages": [{"role": "user", "content": "a"}], "n": 129}, "'n'"),
    ],
)
def test_bad_bodies_are_4xx_naming_the_problem(
    gateway: GatewayProcess, key: str, body: dict[str, object], needle: str
) -> None:
    reply = chat(gateway, key, **body)
    assert 400 <= reply.status_code < 500
    assert needle in reply.json()["error"]["message"]


def test_a_huge_max_tokens_is_forwarded_as_the_gateway_cap(gateway: GatewayProcess) -> None:
    """2**62 output tokens was a 500 (an overflow in the store); now the
    hold and the forwarded cap are MAX_OUTPUT_TOKENS, and the pod judges that cap against
    its context (a 400 from the pod, passed through, is the right answer here). A key
    with no budget anywhere: a budget would refuse the hold before the store wrote it."""
    key = create_key(gateway.config_path, "--team", "unbudgeted")
    with httpx.Client(base_url=gateway.url) as http:
        reply = http.post(
            "/v1/completions",
            json={"model": "tiny-lm", "prompt": "a", "max_tokens": 2**62},
            headers={"authorization": f"Bearer {key}"},
        )
    assert reply.status_code == 400, reply.text
    assert str(MAX_OUTPUT_TOKENS) in reply.json()["error"]["message"]


def test_a_body_over_the_limit_is_413(gateway: GatewayProcess, key: str) -> None:
    prompt = "x" * 70_000
    with httpx.Client(base_url=gateway.url) as http:
        reply = http.post(
            "/v1/completions",
            json={"model": "tiny-lm", "prompt": prompt},
            headers={"authorization": f"Bearer {key}"},
        )
    assert reply.status_code == 413
    assert "65536" in reply.json()["error"]["message"]


def test_not_json_is_400(gateway: GatewayProcess, key: str) -> None:
    with httpx.Client(base_url=gateway.url) as http:
        reply = http.post(
            "/v1/completions", content=b"{nope", headers={"authorization": f"Bearer {key}"}
        )
    assert reply.status_code == 400
    assert "JSON" in reply.json()["error"]["message"]


def _samples(gateway: GatewayProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(gateway.get("/metrics").text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_and_spend_agree(gateway: GatewayProcess, client: openai.OpenAI) -> None:
    result = client.completions.create(
        model="tiny-lm",
        prompt="The function returns",
        max_tokens=5,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert result.usage is not None
    expected_usd = (result.usage.prompt_tokens * 1.0 + 5 * 2.0) / 1e6

    def spend_rows() -> list[dict[str, object]]:
        done = gateway.cli("spend", "--by", "namespace", "--format", "json")
        assert done.returncode == 0, done.stderr
        rows: list[dict[str, object]] = json.loads(done.stdout)
        return rows

    def team_a() -> dict[str, object]:
        return next(r for r in spend_rows() if r["namespace"] == "team-a")

    def metric(name: str, *pairs: tuple[str, str]) -> float:
        return sum(
            v
            for (n, labels), v in _samples(gateway).items()
            if n == name and ("namespace", "team-a") in labels and all(p in labels for p in pairs)
        )

    def consistent() -> bool:  # settlement lands just after the response is sent
        row = team_a()
        spent = float(str(row["spend_usd"]))
        return (
            spent >= expected_usd
            and metric("podserve_gateway_spend_usd_total") == pytest.approx(spent, abs=1e-9)
            and metric("podserve_gateway_tokens_total", ("kind", "prompt")) == row["prompt_tokens"]
        )

    wait_until(consistent, timeout_s=10, what="ledger and metrics agree")
    assert set(team_a()) == {
        "namespace",
        "spend_usd",
        "prompt_tokens",
        "completion_tokens",
        "requests",
    }
    samples = _samples(gateway)
    names = {name for name, _ in samples}
    assert {
        "podserve_gateway_requests_total",
        "podserve_gateway_tokens_total",
        "podserve_gateway_spend_usd_total",
        "podserve_gateway_rejections_total",
        "podserve_gateway_upstream_latency_seconds_bucket",
    } <= names
    rejected = sum(
        v
        for (n, labels), v in samples.items()
        if n == "podserve_gateway_rejections_total" and ("reason", "auth") in labels
    )
    assert rejected >= 1
    text = run_cli(Path(gateway.config_path), "spend", "--by", "model")
    assert text.returncode == 0
    assert "tiny-lm" in text.stdout


def test_the_edge_answers_unknown_routes_and_methods_with_json(
    gateway: GatewayProcess, key: str
) -> None:
    auth = {"authorization": f"Bearer {key}"}
    body = {
        "inputs": [
            {"name": "features", "shape": [1, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2]}
        ]
    }
    raw = json.dumps(body).encode()

    def chunks(data: bytes, size: int) -> Iterator[bytes]:
        for i in range(0, len(data), size):
            yield data[i : i + size]

    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        unknown = http.get("/v1/nope", headers=auth)
        wrong_method = http.get("/v1/completions", headers=auth)
        bad_v2 = http.post("/v2/models/iris/bogus", json=body, headers=auth)
        empty_name = http.post("/v2/models//infer", json=body, headers=auth)
        versioned = http.post("/v2/models/iris/versions/1/infer", json=body, headers=auth)
        # A chunked upload arrives as several ASGI messages: read whole, and capped.
        chunked = http.post("/v2/models/iris/infer", content=chunks(raw, 7), headers=auth)
        too_big = http.post(
            "/v1/completions",
            content=chunks(json.dumps({"model": "tiny-lm", "prompt": "x" * 70_000}).encode(), 4096),
            headers=auth,
        )
        own = [http.get(path) for path in ("/healthz", "/ready", "/metrics")]
    # Every response carries the overhead header: the app's own refusals and routes too.
    for reply in (unknown, wrong_method, bad_v2, empty_name, too_big, *own):
        assert float(reply.headers["x-podserve-gateway-overhead-ms"]) >= 0, reply.text
    for reply in (unknown, bad_v2, empty_name):
        assert reply.status_code == 404, reply.text
    assert unknown.json()["error"]["type"] == "invalid_request_error"
    for reply in (bad_v2, empty_name):  # OIP's shape on /v2 (tritonclient reads a string)
        assert "no route" in reply.json()["error"]
    assert wrong_method.status_code == 405
    assert wrong_method.headers["allow"] == "POST"
    assert "GET" in wrong_method.json()["error"]["message"]
    assert versioned.status_code == 200, versioned.text
    assert chunked.status_code == 200, chunked.text
    assert chunked.json()["outputs"] == versioned.json()["outputs"]
    assert too_big.status_code == 413
    assert "65536" in too_big.json()["error"]["message"]
