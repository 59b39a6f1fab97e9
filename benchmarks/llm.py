"""Generation benchmarks (generative issue), on the bundled tiny LM, with streaming
clients (`podserve bench --api openai-completions`) on the same machine, in one run:

1. tokens/s at 32 concurrent streams x 64 new tokens, continuous batching
   (max_num_seqs=32) / the same engine with max_num_seqs=1 — target >= 8x;
2. TTFT of requests arriving while 16 long streams run / TTFT on an idle server —
   target <= 3x;
3. goodput (requests/s meeting TTFT <= 1 s and TPOT <= 100 ms, 99%) under Poisson
   arrivals, reported over a rate sweep.

    python benchmarks/llm.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import servers
import yaml

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "models" / "tiny-lm"
PODSERVE = Path(sys.executable).parent / "podserve"


def repository(scratch: Path, name: str, max_num_seqs: int) -> Path:
    repo = scratch / name
    copy = repo / "tiny-lm"
    shutil.copytree(TINY, copy)
    config = yaml.safe_load((copy / "model.yaml").read_text())
    config["parameters"]["max_num_seqs"] = max_num_seqs
    (copy / "model.yaml").write_text(yaml.safe_dump(config))
    return repo


def bench(port: int, out: Path, *args: str) -> list[dict[str, object]]:
    command = [
        str(PODSERVE),
        "bench",
        "--url",
        f"http://127.0.0.1:{port}",
        "--api",
        "openai-completions",
        "--model",
        "tiny-lm",
        "--prompt-tokens",
        "16..32",
        "--ignore-eos",
        "--warmup",
        "1s",
        "--out",
        str(out),
        "--no-plots",
        "--no-progress",
        *args,
    ]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return list(json.loads((out / "result.json").read_text())["steps"])


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="podserve-llm-") as tmp:
        scratch = Path(tmp)
        logs = scratch / "logs"
        logs.mkdir()
        with (
            servers.podserve("cb", repository(scratch, "cb", 32), logs) as cb,
            servers.podserve("serial", repository(scratch, "serial", 1), logs) as serial,
        ):
            load = ("--max-tokens", "64", "--concurrency", "32", "--requests", "96")
            batched = bench(cb.port, scratch / "b1", *load)[0]
            one = bench(serial.port, scratch / "b2", *load)[0]
            idle = bench(
                cb.port,
                scratch / "idle",
                "--max-tokens",
                "8",
                "--concurrency",
                "1",
                "--requests",
                "30",
            )[0]
            # 16 long streams in the background, probes of one request at a time meanwhile.
            background = subprocess.Popen(
                [
                    str(PODSERVE),
                    "bench",
                    "--url",
                    f"http://127.0.0.1:{cb.port}",
                    "--api",
                    "openai-completions",
                    "--model",
                    "tiny-lm",
                    "--prompt-tokens",
                    "16..32",
                    "--max-tokens",
                    "250",
                    "--ignore-eos",
                    "--concurrency",
                    "16",
                    "--duration",
                    "14s",
                    "--warmup",
                    "1s",
                    "--out",
                    str(scratch / "bg"),
                    "--no-plots",
                    "--no-progress",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                busy = bench(
                    cb.port,
                    scratch / "busy",
                    "--max-tokens",
                    "8",
                    "--concurrency",
                    "1",
                    "--duration",
                    "8s",
                    "--warmup",
                    "3s",
                )[0]
            finally:
                background.wait(timeout=120)
            sweep = bench(
                cb.port,
                scratch / "sweep",
                "--max-tokens",
                "64",
                "--rate",
                "2,4,8,16,32",
                "--duration",
                "6s",
                "--slo",
                "ttft=1s,tpot=100ms",
            )
    ratio = float(batched["output_tokens_per_s"]) / float(one["output_tokens_per_s"])
    ttft_idle = float(idle["ttft_ms"]["p50"])  # type: ignore[index]
    ttft_busy = float(busy["ttft_ms"]["p50"])  # type: ignore[index]
    print("| target | measured | goal | result |\n|---|---|---|---|")
    print(
        f"| tokens/s, 32 streams x 64 tokens: max_num_seqs=32 ÷ max_num_seqs=1 "
        f"({batched['output_tokens_per_s']:.0f} ÷ {one['output_tokens_per_s']:.0f}) | "
        f"{ratio:.1f}x | ≥ 8x | {'PASS' if ratio >= 8 else 'FAIL'} |"
    )
    print(
        f"| TTFT p50 with 16 long streams running ÷ idle ({ttft_busy:.1f} ÷ {ttft_idle:.1f} ms)"
        f" | {ttft_busy / ttft_idle:.2f}x | ≤ 3x | "
        f"{'PASS' if ttft_busy / ttft_idle <= 3 else 'FAIL'} |"
    )
    print("\nGoodput under Poisson arrivals (SLO: TTFT ≤ 1 s and TPOT ≤ 100 ms for 99%):\n")
    print("| offered req/s | served req/s | goodput req/s | TTFT p99 ms | TPOT p99 ms | SLO met |")
    print("|---|---|---|---|---|---|")
    for step in sweep:
        ttft = step["ttft_ms"]["p99"] if step["ttft_ms"] else float("nan")  # type: ignore[index]
        tpot = step["tpot_ms"]["p99"] if step["tpot_ms"] else float("nan")  # type: ignore[index]
        print(
            f"| {step['level']:g} | {step['throughput_rps']:.1f} | {step['goodput_rps']:.1f} "
            f"| {ttft:.0f} | {tpot:.1f} | {step['slo_met']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
