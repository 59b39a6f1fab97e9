"""Triton's system shared memory against the binary extension and JSON, on REST and gRPC.

    python benchmarks/shm.py [--seconds 2] [--out results.json]

A real `podserve serve` on loopback serves two models of the fake runtime (y = 2x, so
the model itself costs next to nothing and the transport is what is measured):

    w1   FP32 [batch, 32]      W1-sized: 32 features x a batch of 8 rows (1 KiB)
    mb   FP32 [1, 262144]      1 MiB

and tritonclient (the synchronous http and grpc clients) sends one request at a time,
as a pre/post-processing sidecar in the same pod would, in each mode:

    shm      inputs and outputs in registered /dev/shm regions: the client copies the
             input into its region and the output out of it (as a sidecar that does not
             compute in place would); only names, offsets and sizes cross the socket
    binary   the binary tensor data extension (REST) / raw_input_contents (gRPC)
    json     REST only: values as JSON numbers (gRPC has no JSON form)

Per case: requests per second and p50 / p99 latency over a fixed time, after a warm-up;
and shm's speed-up over binary on the same edge and tensor, the one number to read
(ratios within one run: the machine's speed cancels out). Every answer is checked
against 2x its input, so a fast wrong path cannot win.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

sys.path.insert(0, str(Path(__file__).resolve().parent))
# benchmarks/ is not a package: its helpers are imported from this directory.
from servers import ServerProcess, free_port

TENSORS = {"w1": (8, 32), "mb": (1, 262144)}
MODEL_YAML = """\
runtime: fake
inputs:
  - {{name: x, datatype: FP32, shape: [-1, {width}]}}
outputs:
  - {{name: y, datatype: FP32, shape: [-1, {width}]}}
"""


@dataclass(frozen=True)
class Result:
    edge: str
    tensor: str
    mode: str
    bytes_each_way: int
    requests: int
    rps: float
    p50_ms: float
    p99_ms: float


def _repository(root: Path) -> Path:
    for name, (_, width) in TENSORS.items():
        (root / name).mkdir(parents=True)
        (root / name / "model.yaml").write_text(MODEL_YAML.format(width=width))
    return root


def _server(repository: Path, log_dir: Path) -> tuple[ServerProcess, int]:
    http_port, grpc_port = free_port(), free_port()
    command = [
        sys.executable,
        "-m",
        "podserve.cli.main",
        "serve",
        "--model-repository",
        str(repository),
        "--port",
        str(http_port),
        "--grpc-port",
        str(grpc_port),
        "--log-format",
        "json",
        "--access-log-sample-rate",
        "0",
    ]
    return ServerProcess("podserve", command, http_port, "/ready", log_dir / "shm.log"), grpc_port


def _measure(call: Callable[[], None], seconds: float) -> tuple[int, float, list[float]]:
    for _ in range(5):  # warm-up: connections, first-call paths
        call()
    samples: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds or len(samples) < 5:
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return len(samples), time.perf_counter() - started, samples


def _case(
    client: Any, module: Any, tensor: str, mode: str, regions: dict[str, Any]
) -> Callable[[], None]:
    rows, width = TENSORS[tensor]
    x = np.random.default_rng(0).random((rows, width), dtype=np.float32)
    expected = x * 2
    size = x.nbytes
    inputs = [module.InferInput("x", [rows, width], "FP32")]
    outputs = [module.InferRequestedOutput("y")]
    if mode == "shm":
        tag = uuid.uuid4().hex[:8]
        in_name, out_name = f"bench_{tensor}_in_{tag}", f"bench_{tensor}_out_{tag}"
        for name in (in_name, out_name):
            key = f"/podserve_{name}"
            regions[name] = shm.create_shared_memory_region(name, key, size)
            client.register_system_shared_memory(name, key, size)
        inputs[0].set_shared_memory(in_name, size)
        outputs[0].set_shared_memory(out_name, size)

        def call() -> None:
            shm.set_shared_memory_region(regions[in_name], [x])
            client.infer(tensor, inputs, outputs=outputs)
            y = np.array(shm.get_contents_as_numpy(regions[out_name], np.float32, [rows, width]))
            assert np.array_equal(y, expected)

        return call

    binary = mode == "binary"
    if module is httpclient:
        outputs = [module.InferRequestedOutput("y", binary_data=binary)]

    def call() -> None:
        if module is httpclient:
            inputs[0].set_data_from_numpy(x, binary_data=binary)
        else:
            inputs[0].set_data_from_numpy(x)
        result = client.infer(tensor, inputs, outputs=outputs)
        assert np.array_equal(result.as_numpy("y"), expected)

    return call


def run(seconds: float) -> list[Result]:
    results: list[Result] = []
    regions: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repository = _repository(Path(tmp) / "models")
        server, grpc_port = _server(repository, Path(tmp))
        with server:
            http = httpclient.InferenceServerClient(f"127.0.0.1:{server.port}")
            grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
            edges = {"rest": (http, httpclient), "grpc": (grpc, grpcclient)}
            try:
                for edge, (client, module) in edges.items():
                    for tensor in TENSORS:
                        modes = ("shm", "binary", "json") if edge == "rest" else ("shm", "binary")
                        for mode in modes:
                            call = _case(client, module, tensor, mode, regions)
                            count, elapsed, samples = _measure(call, seconds)
                            samples.sort()
                            rows, width = TENSORS[tensor]
                            results.append(
                                Result(
                                    edge=edge,
                                    tensor=tensor,
                                    mode=mode,
                                    bytes_each_way=rows * width * 4,
                                    requests=count,
                                    rps=round(count / elapsed, 1),
                                    p50_ms=round(statistics.median(samples) * 1e3, 3),
                                    p99_ms=round(samples[int(0.99 * (len(samples) - 1))] * 1e3, 3),
                                )
                            )
                            print(_row(results[-1]), flush=True)
                http.unregister_system_shared_memory()
            finally:
                for handle in regions.values():
                    shm.destroy_shared_memory_region(handle)
                http.close()
                grpc.close()
    return results


def _row(r: Result) -> str:
    return (
        f"| {r.edge:4} | {r.tensor:3} | {r.mode:6} | {r.bytes_each_way:>9,} | {r.rps:>8.1f} "
        f"| {r.p50_ms:>8.3f} | {r.p99_ms:>8.3f} |"
    )


def speedups(results: list[Result]) -> dict[str, float]:
    """shm's p50 speed-up over binary (and over JSON on REST), per edge and tensor."""
    by = {(r.edge, r.tensor, r.mode): r for r in results}
    out: dict[str, float] = {}
    for (edge, tensor, mode), r in by.items():
        if mode == "shm":
            continue
        out[f"{edge}/{tensor}: {mode} p50 / shm p50"] = round(
            r.p50_ms / by[(edge, tensor, "shm")].p50_ms, 2
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measured time per case")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    print("| edge | tensor | mode | bytes | req/s | p50 ms | p99 ms |")
    print("|---|---|---|---:|---:|---:|---:|")
    results = run(args.seconds)
    ratios = speedups(results)
    print()
    for name, ratio in ratios.items():
        print(f"{name} = {ratio}")
    if args.out:
        args.out.write_text(
            json.dumps({"results": [asdict(r) for r in results], "ratios": ratios}, indent=2)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
