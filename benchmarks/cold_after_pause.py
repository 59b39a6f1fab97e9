"""Does Python run slower after a pause, whatever the pause did? (issues 14 and 16, c=1)

    python benchmarks/cold_after_pause.py

`cold_after_forward.py` found the event loop's Python 3-10x slower right after a W2
forward, and put it on the forward's 90 MB of weights evicting the caches. This separates
the two causes: the same loop-like piece of Python (an OIP body parsed, a dict built, an
OIP response encoded, small strings), timed by thread CPU right after a pause of each
length in which this process did nothing but spin on the clock (no memory traffic, no
sleep, no other thread), or slept, or ran a W2 forward on a worker thread as the server
does. Each kind of pause alternates with the others in every round, so drift hits all.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import inprocess

from podserve.core.tensors import Datatype, InferRequest, InferResponse, Tensor
from podserve.protocol.v2.encode import encode_infer_response

REPO_ROOT = Path(__file__).resolve().parents[1]
SENTENCE = b"The quick brown fox jumps over the lazy dog near the river bank."
GAPS_MS = (0.0, 0.1, 0.5, 1.0, 2.0, 5.0, 8.0, 20.0)
ROUNDS = 200

_RESPONSE = InferResponse(
    model_name="w2",
    model_version="1",
    outputs=(Tensor("embedding", Datatype.FP32, np.zeros((1, 384), dtype=np.float32)),),
)
_BODY = orjson.dumps(
    {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["text"]}]}
)


def loop_work() -> float:
    """Microseconds of this thread's CPU for one request's worth of loop-like Python."""
    started = time.thread_time_ns()
    parsed = orjson.loads(_BODY)
    {key: value for key, value in parsed.items()}
    encode_infer_response(_RESPONSE, binary_outputs=False)
    [str(i) for i in range(50)]
    return (time.thread_time_ns() - started) / 1000


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = inprocess.load(REPO_ROOT / "examples" / "models" / "minilm")
    worker = ThreadPoolExecutor(1)
    request = InferRequest(
        model_name="w2",
        inputs=(Tensor("text", Datatype.BYTES, np.array([SENTENCE], dtype=object)),),
    )

    def forward() -> None:
        model.postprocess(model.predict(model.preprocess(request)), request)

    pauses: dict[str, Callable[[], None]] = {"back to back": lambda: None}
    for gap in GAPS_MS[1:]:
        pauses[f"spin {gap:g} ms"] = lambda s=gap / 1000: spin(s)
    pauses["sleep 8 ms"] = lambda: time.sleep(0.008)
    pauses["W2 forward on a thread"] = lambda: worker.submit(forward).result()
    for _ in range(20):
        for pause in pauses.values():
            pause()
            loop_work()
    samples: dict[str, list[float]] = {name: [] for name in pauses}
    for _ in range(ROUNDS):
        for name, pause in pauses.items():
            pause()
            samples[name].append(loop_work())
    warm = statistics.median(samples["back to back"])
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()}, {ROUNDS} rounds")
    print(f"{'after':28s} {'p50 us':>8s} {'x back to back':>15s}")
    for name, values in samples.items():
        p50 = statistics.median(values)
        print(f"{name:28s} {p50:8.1f} {p50 / warm:15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
