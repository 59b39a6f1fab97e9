"""Soak: hours of mixed traffic must not grow memory or file descriptors, and valid input
must never get a 5xx.

    python benchmarks/soak.py [--duration 1800]      # the default is 30 minutes
    python benchmarks/soak.py --duration 150         # a short run

One `podserve serve` replica serves `iris` (OIP v2) and `tiny-lm` (OpenAI) and gets, all
at once, for `--duration` seconds:

* OIP v2 inference over REST and over gRPC (iris);
* OpenAI completions and chat completions, not streamed (tiny-lm);
* OpenAI completions streamed over SSE, read to the end;
* cancels: a stream the client closes after its first events, and a REST request whose
  client gives up (a 1 ms timeout) before the answer;
* bad inputs, one after another from a fixed list (malformed JSON, wrong shapes and
  datatypes, a zero-row batch, NaN timeouts, a Unicode digit in a length header, OpenAI
  fields of the wrong type or out of range, an unknown model, gRPC with too few bytes):
  each must get a 4xx (gRPC: INVALID_ARGUMENT/NOT_FOUND), never a 5xx or a hang.

RSS and open file descriptors of the server are read from /proc at the start (after a
warm-up), the middle and the end, and every 10 s in between. Reported: requests and
outcomes per kind, 5xx answers to valid input (the goal: 0), bad inputs answered with a
5xx or not at all (by case), and the RSS/fd growth from start to end. Results: stdout
and benchmarks/results/soak-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
from tritonclient.grpc import service_pb2 as triton_pb
from tritonclient.grpc import service_pb2_grpc as triton_stub

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness

IRIS = "/v2/models/iris/infer"
JSON: dict[str, str | bytes] = {"content-type": "application/json"}


def _features(shape: list[int], data: list[Any], datatype: str = "FP32") -> bytes:
    return orjson.dumps(
        {"inputs": [{"name": "features", "shape": shape, "datatype": datatype, "data": data}]}
    )


# (case, path, body, headers): every one is a client error.
BAD_REST: list[tuple[str, str, bytes, dict[str, str | bytes]]] = [
    ("truncated json", IRIS, b'{"inputs": [', JSON),
    ("empty body", IRIS, b"", JSON),
    ("not an object", IRIS, b"[1, 2, 3]", JSON),
    ("shape/data mismatch", IRIS, _features([1, 4], [1.0, 2.0, 3.0]), JSON),
    ("unknown datatype", IRIS, _features([1, 4], [1.0] * 4, "FP99"), JSON),
    (
        "wrong input name",
        IRIS,
        orjson.dumps(
            {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1] * 4}]}
        ),
        JSON,
    ),
    ("string in FP32", IRIS, _features([1, 4], ["a", 1, 2, 3]), JSON),
    ("bool in FP32", IRIS, _features([1, 4], [True, 1.0, 2.0, 3.0]), JSON),
    ("zero-row batch", IRIS, _features([0, 4], []), JSON),
    ("huge dims, zero size", IRIS, _features([0, 2**40], []), JSON),
    ("negative dim", IRIS, _features([-1, 4], [1.0] * 4), JSON),
    (
        "NaN timeout",
        IRIS,
        b'{"inputs": [{"name": "features", "shape": [1, 4], "datatype": '
        b'"FP32", "data": [1, 2, 3, 4]}], "parameters": {"timeout": NaN}}',
        JSON,
    ),
    (
        "nan timeout header",
        IRIS,
        _features([1, 4], [1.0] * 4),
        {**JSON, "x-request-timeout-ms": "nan"},
    ),
    (
        "unicode digit header length",
        IRIS,
        _features([1, 4], [1.0] * 4),
        {"content-type": "application/octet-stream", "inference-header-content-length": b"\xb2"},
    ),
    ("unknown model", "/v2/models/nope/infer", _features([1, 4], [1.0] * 4), JSON),
    (
        "openai stream as string",
        "/v1/completions",
        orjson.dumps({"model": "tiny-lm", "prompt": "x", "stream": "yes"}),
        JSON,
    ),
    (
        "openai huge presence_penalty",
        "/v1/completions",
        orjson.dumps({"model": "tiny-lm", "prompt": "x", "presence_penalty": 1e308}),
        JSON,
    ),
    (
        "openai negative max_tokens",
        "/v1/completions",
        orjson.dumps({"model": "tiny-lm", "prompt": "x", "max_tokens": -1}),
        JSON,
    ),
    (
        "openai chat without messages",
        "/v1/chat/completions",
        orjson.dumps({"model": "tiny-lm"}),
        JSON,
    ),
    (
        "openai unknown model",
        "/v1/completions",
        orjson.dumps({"model": "nope", "prompt": "x"}),
        JSON,
    ),
]


class Soak:
    def __init__(self, replica: harness.Replica) -> None:
        self.replica = replica
        self.base = replica.url
        self.valid: dict[str, harness.Tally] = {}
        self.bad: dict[str, Counter[str]] = {}
        self.cancels: Counter[str] = Counter()
        self.stop = asyncio.Event()
        self.started_s = time.monotonic()

    def tally(self, kind: str) -> harness.Tally:
        return self.valid.setdefault(kind, harness.Tally())

    async def openai(self, path: str, body: dict[str, Any], kind: str) -> None:
        tally = self.tally(kind)
        async with httpx.AsyncClient(timeout=60) as client:
            while not self.stop.is_set():
                start = time.monotonic()
                try:
                    response = await client.post(f"{self.base}{path}", json=body)
                except httpx.HTTPError as exc:
                    tally.record(f"error:{type(exc).__name__}")
                    continue
                ok = response.status_code == 200 and response.json().get("choices")
                tally.record("ok" if ok else str(response.status_code), time.monotonic() - start)

    async def stream_cancels(self) -> None:
        """Open a stream, read its first event, close it: the server must free the slot."""
        body = {"model": "tiny-lm", "prompt": "class A:", "max_tokens": 200, "stream": True}
        async with httpx.AsyncClient(timeout=60) as client:
            while not self.stop.is_set():
                try:
                    async with client.stream("POST", f"{self.base}/v1/completions", json=body) as r:
                        if r.status_code != 200:
                            self.cancels[f"stream:{r.status_code}"] += 1
                            continue
                        async for line in r.aiter_lines():
                            if line.startswith("data:"):
                                break
                    self.cancels["stream:cancelled"] += 1
                except httpx.HTTPError as exc:
                    self.cancels[f"stream:{type(exc).__name__}"] += 1
                await asyncio.sleep(0.2)  # pacing

    async def request_cancels(self) -> None:
        body = harness.iris_body(8)
        async with httpx.AsyncClient(timeout=0.001) as client:
            while not self.stop.is_set():
                try:
                    await client.post(f"{self.base}{IRIS}", content=body, headers=JSON)
                    self.cancels["rest:answered before the timeout"] += 1
                except httpx.TimeoutException:
                    self.cancels["rest:cancelled"] += 1
                except httpx.HTTPError as exc:
                    self.cancels[f"rest:{type(exc).__name__}"] += 1
                await asyncio.sleep(0.2)  # pacing

    async def bad_inputs(self) -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            while not self.stop.is_set():
                for case, path, content, headers in BAD_REST:
                    counts = self.bad.setdefault(case, Counter())
                    try:
                        response = await client.post(
                            f"{self.base}{path}", content=content, headers=headers
                        )
                    except httpx.TimeoutException:
                        counts["hang (30 s)"] += 1
                        continue
                    except httpx.HTTPError as exc:
                        counts[type(exc).__name__] += 1
                        continue
                    json_error = response.headers.get("content-type", "").startswith(
                        "application/json"
                    )
                    counts[f"{response.status_code}{'' if json_error else ' (not JSON)'}"] += 1
                await self.bad_grpc()
                await asyncio.sleep(0.5)  # pacing

    async def bad_grpc(self) -> None:
        cases = {
            "grpc too few bytes": ([1, 4], b"\x00" * 8, "iris"),
            "grpc zero rows": ([0, 4], b"", "iris"),
            "grpc unknown model": ([1, 4], b"\x00" * 16, "nope"),
        }
        target = f"127.0.0.1:{self.replica.grpc_port}"
        async with grpc.aio.insecure_channel(target) as channel:
            stub = triton_stub.GRPCInferenceServiceStub(channel)
            for case, (shape, raw, model) in cases.items():
                request = triton_pb.ModelInferRequest(model_name=model)
                request.inputs.add(name="features", datatype="FP32", shape=shape)
                request.raw_input_contents.append(raw)
                counts = self.bad.setdefault(case, Counter())
                try:
                    await stub.ModelInfer(request, timeout=30)
                    counts["OK (accepted)"] += 1
                except grpc.aio.AioRpcError as exc:
                    counts[exc.code().name] += 1

    def sample(self) -> dict[str, Any]:
        return {
            "at_s": round(time.monotonic() - self.started_s, 1),
            "rss_mb": round(harness.rss_bytes(self.replica.pid) / 1e6, 1),
            "open_fds": harness.open_fds(self.replica.pid),
        }

    async def run(self, duration_s: float) -> dict[str, Any]:
        workers = [
            *(
                harness.rest_loop(self.base, self.tally("rest"), self.stop, pause_s=0.01)
                for _ in range(2)
            ),
            harness.grpc_loop(
                f"127.0.0.1:{self.replica.grpc_port}", self.tally("grpc"), self.stop, pause_s=0.01
            ),
            self.openai(
                "/v1/completions",
                {"model": "tiny-lm", "prompt": "import os", "max_tokens": 16},
                "openai-completions",
            ),
            self.openai(
                "/v1/chat/completions",
                {
                    "model": "tiny-lm",
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 16,
                },
                "openai-chat",
            ),
            *(
                harness.sse_loop(self.base, self.tally("sse"), self.stop, max_tokens=48)
                for _ in range(2)
            ),
            self.stream_cancels(),
            self.request_cancels(),
            self.bad_inputs(),
        ]
        tasks = [asyncio.create_task(w) for w in workers]
        await asyncio.sleep(min(10.0, duration_s / 10))  # warm-up before the first sample
        self.started_s = time.monotonic()
        series = [self.sample()]
        marks = {"start": series[0]}
        end_s = self.started_s + duration_s
        while time.monotonic() < end_s:
            await asyncio.sleep(min(10.0, max(0.0, end_s - time.monotonic())))  # sampling
            series.append(self.sample())
            if "middle" not in marks and time.monotonic() >= self.started_s + duration_s / 2:
                marks["middle"] = series[-1]
        marks["end"] = series[-1]
        self.stop.set()
        await asyncio.gather(*tasks)
        # A 5xx, or a gRPC status a server error maps to, on a valid request.
        server_errors = ("grpc:INTERNAL", "grpc:UNAVAILABLE", "grpc:UNKNOWN", "grpc:DATA_LOSS")
        valid_5xx = {
            kind: {
                o: n
                for o, n in t.outcomes.items()
                if o.split(":")[-1][:1] == "5" or o.startswith(server_errors)
            }
            for kind, t in self.valid.items()
        }
        # A bad input is handled when it is refused as the client's fault: a 4xx with a
        # JSON body over HTTP, a client-error status over gRPC.
        client_errors = ("INVALID_ARGUMENT", "NOT_FOUND", "OUT_OF_RANGE", "FAILED_PRECONDITION")
        not_refused = {
            case: dict(c)
            for case, c in self.bad.items()
            if any(not (k[:1] == "4" and "not JSON" not in k) and k not in client_errors for k in c)
        }
        return {
            "valid": {kind: t.summary() for kind, t in self.valid.items()},
            "valid_5xx": {k: v for k, v in valid_5xx.items() if v},
            "valid_5xx_total": sum(sum(v.values()) for v in valid_5xx.values()),
            "valid_failures": {
                kind: {o: n for o, n in t.outcomes.items() if o != "ok"}
                for kind, t in self.valid.items()
                if t.failed
            },
            "cancels": dict(self.cancels),
            "bad_inputs": {case: dict(c) for case, c in self.bad.items()},
            "bad_inputs_not_refused": not_refused,
            "bad_inputs_5xx": {
                case: {k: n for k, n in c.items() if k[:1] == "5" or k in ("INTERNAL", "UNKNOWN")}
                for case, c in not_refused.items()
                if any(k[:1] == "5" or k in ("INTERNAL", "UNKNOWN") for k in c)
            },
            "samples": marks,
            "series": series,
            "rss_growth_mb": round(marks["end"]["rss_mb"] - marks["start"]["rss_mb"], 1),
            "fd_growth": marks["end"]["open_fds"] - marks["start"]["open_fds"],
        }


async def main_async(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="podserve-soak-"))
    repo = harness.repository(workdir / "repo", ("iris", "tiny-lm"))
    replica = harness.Replica("soak", repo, workdir).start()
    try:
        await asyncio.to_thread(replica.wait_ready)
        result = await Soak(replica).run(args.duration)
        alive = replica.process is not None and replica.process.poll() is None
    finally:
        replica.stop()
    result["server_alive_at_end"] = alive
    report = {
        "benchmark": "soak",
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "args": vars(args),
        "log": str(replica.log_path),
        "results": result,
    }
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = harness.RESULTS / f"soak-{stamp}.json"
    harness.write_report(out, report)
    printable = {k: v for k, v in result.items() if k != "series"}
    print(orjson.dumps(printable, option=orjson.OPT_INDENT_2).decode())
    print(f"report: {out}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=1800.0, help="seconds (default 30 min)")
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
