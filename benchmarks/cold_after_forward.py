"""Does the event loop's Python run slower right after a forward pass? (issue 16 item 1)

    python benchmarks/cold_after_forward.py

W2's event loop spends 0.75-0.83 ms of CPU a request at concurrency 1 against W1's 0.18 ms
on the same code path (benchmarks/threads.py). One candidate: the forward streams the
encoder's ~90 MB of weights through the caches, so the interpreter's data is cold when the
loop runs next. This times a fixed piece of loop-like Python (JSON parse, dict building,
encoding an OIP response, small strings) by thread CPU time: alone, right after an
all-MiniLM-L6-v2 forward on a worker thread (as the server runs it), and alone again.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
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


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = inprocess.load(REPO_ROOT / "examples" / "models" / "minilm")
    worker = ThreadPoolExecutor(1)  # the model runs off the measuring thread, as served

    def forward() -> object:
        data = np.array([SENTENCE], dtype=object)
        request = InferRequest(model_name="w2", inputs=(Tensor("text", Datatype.BYTES, data),))
        return model.postprocess(model.predict(model.preprocess(request)), request)

    embedding = np.zeros((1, 384), dtype=np.float32)
    response = InferResponse(
        model_name="w2",
        model_version="1",
        outputs=(Tensor("embedding", Datatype.FP32, embedding),),
    )
    body = orjson.dumps(
        {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["text"]}]}
    )

    def loop_work() -> float:
        started = time.thread_time()
        for _ in range(20):
            parsed = orjson.loads(body)
            {key: value for key, value in parsed.items()}
            encode_infer_response(response, binary_outputs=False)
            [str(i) for i in range(50)]
        return time.thread_time() - started

    for _ in range(50):
        loop_work()
    worker.submit(forward).result()
    alone = [loop_work() for _ in range(300)]
    after = []
    for _ in range(300):
        worker.submit(forward).result()
        after.append(loop_work())
    again = [loop_work() for _ in range(300)]
    a, b, c = (statistics.median(x) * 1e6 for x in (alone, after, again))
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()}")
    print(
        f"loop-like Python, thread CPU: alone {a:.0f} us, right after a forward {b:.0f} us "
        f"({b / a:.2f}x), alone again {c:.0f} us"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
