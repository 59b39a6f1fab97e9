"""Streams still running when the drain timeout expires (issue 15), on a real
`podserve serve` process with the bundled tiny LM.

What each client sees, as documented in docs/operations.md:
- an SSE stream (OpenAI `/v1/completions` and `/v1/chat/completions`, Triton's
  `/v2/models/{m}/generate_stream`) gets the events produced so far, then one last
  event whose data is the error naming the drain (OpenAI's `{"error": {...}}` shape on
  the OpenAI routes, so the openai SDK raises `APIError`; `{"error": "..."}` on the
  Triton route), then on the OpenAI routes `data: [DONE]` (as a stream its deadline
  ends), then the response ends and the connection closes;
- a gRPC ModelStreamInfer generation stream (the vLLM backend's tensors) gets its token
  responses, then ends UNAVAILABLE;
- one log line per cut stream, no traceback, exit code 1.

How the streams stay in flight until the cut without timing: every client stops
reading after its first event, with a small receive buffer, so the server's sends stall
on TCP backpressure (thousands of tokens, hundreds of KB, against ~100 KB of socket and
transport buffers); and each asks for 1,900 tokens with `ignore_eos` from a copy of the
tiny LM whose context is raised to 2,048 positions (only the position limit changes; the
text past 512 positions is nonsense, which does not matter here). If a stream finished
before the cut, its assertions fail: they cannot pass by accident.
"""

from __future__ import annotations

import json
import queue
import shutil
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import openai
import pytest
import tritonclient.grpc as triton_grpc
import yaml
from tritonclient.utils import InferenceServerException

from tests.support.server import ServerProcess, wait_until

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
PROMPT = "def main():"
TOKENS = 1900  # of 2,048 positions: at >= 1 ms a step, seconds past the cut
RCVBUF = 4096  # bytes; the kernel doubles it, and it stops receive-window autotuning
CUT_LINE = "drain timeout expired; cutting in-flight requests"


def _long_lm(root: Path) -> None:
    """The bundled tiny LM with room for long streams: context 2,048, 4 sequences."""
    target = root / "long-lm"
    shutil.copytree(REPO_ROOT / "examples" / "models" / "tiny-lm", target)
    config_path = target / "config.json"
    config = json.loads(config_path.read_text())
    config["max_position_embeddings"] = 2048
    config_path.write_text(json.dumps(config))
    spec_path = target / "model.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    spec["name"] = "long-lm"
    spec["parameters"].update(max_num_seqs=4, max_tokens_cap=TOKENS)
    spec_path.write_text(yaml.safe_dump(spec))


def _slow_reader() -> httpx2.Client:
    """The openai SDK (3.x) runs on httpx2, httpx's successor, and takes its client."""
    options = [(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)]
    return httpx2.Client(transport=httpx2.HTTPTransport(socket_options=options), timeout=60)


class RawStream:
    """One HTTP/1.1 request on a plain socket, so the test can see the response end and
    the server close the connection (httpx hides both)."""

    def __init__(self, port: int, path: str, body: dict[str, Any]) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        self.sock.settimeout(60)
        self.sock.connect(("127.0.0.1", port))
        payload = json.dumps(body).encode()
        self.sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        self.received = b""

    def read_until(self, marker: bytes) -> None:
        while marker not in self.received:
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed early"
            self.received += chunk

    def read_to_close(self) -> None:
        """Read until the server closes the connection (recv returns b'')."""
        while chunk := self.sock.recv(65536):
            self.received += chunk
        self.sock.close()

    def events(self) -> tuple[bytes, list[str], bool]:
        """The response head, the data of every SSE event, and whether the chunked body
        ended with its terminating zero-length chunk."""
        head, _, rest = self.received.partition(b"\r\n\r\n")
        body, terminated = b"", False
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                terminated = True
                break
            body, rest = body + rest[:size], rest[size + 2 :]
        data = [
            line.removeprefix("data: ")
            for line in body.decode().split("\n")
            if line.startswith("data: ")
        ]
        return head, data, terminated


def _tensor_request(prompt: str) -> list[triton_grpc.InferInput]:
    text = triton_grpc.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([prompt.encode()], dtype=object))
    flag = triton_grpc.InferInput("stream", [1], "BOOL")
    flag.set_data_from_numpy(np.array([True], dtype=bool))
    params = triton_grpc.InferInput("sampling_parameters", [1], "BYTES")
    sampling = {"temperature": 0, "max_tokens": TOKENS, "ignore_eos": True}
    params.set_data_from_numpy(np.array([json.dumps(sampling).encode()], dtype=object))
    return [text, flag, params]


def test_streams_cut_mid_way_end_with_an_error_event_or_unavailable(tmp_path: Path) -> None:
    _long_lm(tmp_path)
    args = ("--model-repository", str(tmp_path), "--drain-timeout-s", "0.5")
    with ServerProcess(*args, grpc=True) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, timeout_s=120, what="ready")
        assert server.grpc_port is not None
        sampling = {"temperature": 0, "max_tokens": TOKENS, "ignore_eos": True}

        # 1. the openai SDK on /v1/completions, reading through a small buffer
        sdk = openai.OpenAI(
            base_url=f"{server.url}/v1",
            api_key="unused",
            http_client=_slow_reader(),
            max_retries=0,
        )
        completion = sdk.completions.create(
            model="long-lm",
            prompt=PROMPT,
            stream=True,
            logprobs=5,  # more bytes per token: the sends stall sooner
            max_tokens=TOKENS,
            temperature=0,
            extra_body={"ignore_eos": True},
        )
        chunks = iter(completion)
        first = next(chunks)
        assert first.choices[0].text is not None

        # 2. /v1/chat/completions and 3. generate_stream on plain sockets
        chat = RawStream(
            server.http_port,
            "/v1/chat/completions",
            {
                "model": "long-lm",
                "messages": [{"role": "user", "content": PROMPT}],
                "stream": True,
                **sampling,
            },
        )
        generate = RawStream(
            server.http_port,
            "/v2/models/long-lm/generate_stream",
            {"text_input": PROMPT, "parameters": sampling},
        )
        for raw in (chat, generate):
            raw.read_until(b"data: ")

        # 4. tritonclient's ModelStreamInfer, decoupled generation
        triton = triton_grpc.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
        triton.start_stream(callback=lambda result, error: answers.put((result, error)))
        triton.async_stream_infer("long-lm", _tensor_request(PROMPT), request_id="gen-1")
        first_reply, first_error = answers.get(timeout=60)
        assert first_error is None, first_error
        assert first_reply.as_numpy("text_output") is not None

        wait_until(
            lambda: server.metric("podserve_inflight_requests", {"model": "long-lm"}) == 4,
            what="four streams in flight",
        )
        server.send_signal(signal.SIGTERM)
        # The clients read on only once the cut has begun: until then the sends stall.
        server.wait_log(lambda r: r.get("msg") == CUT_LINE, timeout_s=30)

        sdk_error: list[BaseException] = []
        sdk_chunks: list[Any] = []

        def read_sdk() -> None:
            try:
                sdk_chunks.extend(chunks)
            except openai.APIError as exc:
                sdk_error.append(exc)

        readers = [
            threading.Thread(target=read_sdk),
            threading.Thread(target=chat.read_to_close),
            threading.Thread(target=generate.read_to_close),
        ]
        for reader in readers:
            reader.start()
        code = server.wait_exit(timeout_s=30)
        for reader in readers:
            reader.join(timeout=30)
        replies: list[tuple[Any, Any]] = []
        while True:
            reply = answers.get(timeout=30)
            replies.append(reply)
            if reply[1] is not None:
                break
        triton.stop_stream()
        triton.close()
        server.stop()

    assert code == 1  # the documented exit code of a drain that cut requests

    # the openai SDK: tokens, then the error event raises APIError naming the drain
    assert len(sdk_error) == 1, f"the stream ended without the error ({len(sdk_chunks)} chunks)"
    assert isinstance(sdk_error[0], openai.APIError)
    assert "drain_timeout_s expired" in sdk_error[0].message
    assert len(sdk_chunks) < TOKENS - 1  # cut mid-way, not finished

    # chat: chunks, then one OpenAI-shaped error event, then the body ends, then the close
    head, data, terminated = chat.events()
    assert head.startswith(b"HTTP/1.1 200")
    assert terminated
    *tokens, last, done = data
    assert done == "[DONE]"  # after the error, as a stream cut by its deadline ends
    assert tokens
    assert all("chat.completion.chunk" in event for event in tokens)
    assert len(tokens) < TOKENS
    error = json.loads(last)["error"]
    assert "drain_timeout_s expired" in error["message"]
    assert error["type"] == "service_unavailable"
    assert error["code"] == "draining"

    # Triton's generate_stream: its own error event shape
    head, data, terminated = generate.events()
    assert head.startswith(b"HTTP/1.1 200")
    assert terminated
    *tokens, last = data
    assert tokens
    assert all("text_output" in event for event in tokens)
    assert "drain_timeout_s expired" in json.loads(last)["error"]

    # gRPC ModelStreamInfer: token responses, then UNAVAILABLE
    *tokens_, (result, stream_error) = replies
    assert result is None
    assert all(error is None for _, error in tokens_)
    assert isinstance(stream_error, InferenceServerException)
    assert stream_error.status() == "StatusCode.UNAVAILABLE"
    assert "drain_timeout_s expired" in stream_error.message()

    lines = [r for r in server.logs if r.get("msg") == "request cut at drain timeout"]
    assert sorted(line["path"] for line in lines) == [
        "/inference.GRPCInferenceService/ModelStreamInfer",
        "/v1/chat/completions",
        "/v1/completions",
        "/v2/models/long-lm/generate_stream",
    ]
    assert all(line["streaming"] for line in lines)
    assert {line["model"] for line in lines} == {"long-lm"}
    text = "".join(server.raw_lines)
    assert "Traceback" not in text
    assert "Exception in ASGI application" not in text
