"""Model loading benchmark (storage issue): a ~200 MB safetensors model loaded through the
torch runtime, against reading the same file, in one run.

    python benchmarks/load.py [--size-mb 200] [--rounds 3]

Targets: peak RSS added by the load <= 1.3x the weights; load time (load + warm-up, as
the server measures it) <= 1.2x the time to read the file. Both are measured in fresh
subprocesses, with the file in the page cache for both (it was just written), so the
comparison is of the work each does, not of the disk.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HIDDEN = 4096
MODULE = textwrap.dedent(
    """
    import torch

    class BigMLP(torch.nn.Module):
        def __init__(self, hidden: int, layers: int) -> None:
            super().__init__()
            self.layers = torch.nn.Sequential(
                *[torch.nn.Linear(hidden, hidden) for _ in range(layers)]
            )

        def forward(self, x):
            return {"y": self.layers(x)}
    """
)

READ = """
import sys, time
path = sys.argv[1]
start = time.perf_counter()
with open(path, "rb") as f:
    data = f.read()
print(time.perf_counter() - start)
"""

LOAD = """
import json, sys, time
from pathlib import Path
import torch  # imported before measuring: a server imports it once at start-up
from podserve.config.model_config import load_model_config
from podserve.repository.loading import load_and_warm

def status_kb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)

config = load_model_config(Path(sys.argv[1]))
# Reset the peak-RSS mark (Linux clear_refs 5), so the peak below is the load's own and
# not an import's; RSS counts the mapped file pages the weights live in.
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before_kb = status_kb("VmRSS")
start = time.perf_counter()
model = load_and_warm(config)
seconds = time.perf_counter() - start
peak_kb = status_kb("VmHWM")
print(json.dumps({"seconds": seconds, "peak_added_bytes": (peak_kb - before_kb) * 1024}))
"""


def build(directory: Path, size_mb: int) -> Path:
    import torch
    from safetensors.torch import save_file

    layers = max(1, round(size_mb * 1024 * 1024 / (4 * (HIDDEN * HIDDEN + HIDDEN))))
    (directory / "bigmlp.py").write_text(MODULE)
    torch.manual_seed(0)
    sys.path.insert(0, str(directory))
    from bigmlp import BigMLP  # type: ignore[import-not-found]  # written just above

    module = BigMLP(HIDDEN, layers)
    save_file(module.state_dict(), str(directory / "weights.safetensors"))
    (directory / "model.yaml").write_text(
        textwrap.dedent(
            f"""
            name: bigmlp
            runtime: torch
            artifact: weights.safetensors
            model_class: "bigmlp:BigMLP"
            inputs: [{{name: x, datatype: FP32, shape: [-1, {HIDDEN}]}}]
            outputs: [{{name: y, datatype: FP32, shape: [-1, {HIDDEN}]}}]
            parameters: {{init_kwargs: {{hidden: {HIDDEN}, layers: {layers}}}}}
            """
        )
    )
    return directory / "weights.safetensors"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="podserve-load-") as scratch:
        directory = Path(scratch)
        weights = build(directory, args.size_mb)
        size = weights.stat().st_size
        reads, loads = [], []
        for _ in range(args.rounds):  # alternate, so drift on a shared machine hits both
            out = subprocess.run(
                [sys.executable, "-c", READ, str(weights)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            reads.append(float(out))
            out = subprocess.run(
                [sys.executable, "-c", LOAD, str(directory)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            loads.append(json.loads(out))
    read_s = min(reads)
    load_s = min(r["seconds"] for r in loads)
    peak = max(r["peak_added_bytes"] for r in loads)
    rss_ratio, time_ratio = peak / size, load_s / read_s
    rows = [
        ("peak RSS added by the load ÷ weights", f"{rss_ratio:.2f}x", "≤ 1.3x", rss_ratio <= 1.3),
        (
            "load + warm-up time ÷ reading the file",
            f"{time_ratio:.2f}x",
            "≤ 1.2x",
            time_ratio <= 1.2,
        ),
    ]
    print(
        f"weights {size / 1e6:.0f} MB; read {read_s * 1000:.0f} ms (best of {args.rounds}); "
        f"load + warm-up {load_s * 1000:.0f} ms; peak RSS added {peak / 1e6:.0f} MB"
    )
    print("| target | measured | goal | result |\n|---|---|---|---|")
    for name, value, goal, ok in rows:
        print(f"| {name} | {value} | {goal} | {'PASS' if ok else 'FAIL'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
