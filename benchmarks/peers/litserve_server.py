"""W1 or W2 under LitServe 0.2.19, answering OIP v2 JSON at /v2/models/{w1,w2}/infer.

    python litserve_server.py {w1|w2} MODEL_DIR --port PORT

A LitServer serves one LitAPI (one path) a server, so table.py starts one process per
workload. The settings are LitServe's defaults but for batching, which the table's row
is about:
- `max_batch_size=64` (podserve's W1/W2 batch limit) with `batch_timeout=0.001` s. Not
  LitAPI's default 0.0: with 0 the inference worker polls its queue with get_nowait()
  in a loop (litserve/loops/base.py collate_requests) and spins a core while idle (seen
  here: 0.95 cores for an idle W1 server, which would have slowed every other contender
  in the same rounds). With a timeout it blocks on the queue, and a batch goes when it
  is full or 1 ms after it started, so a lone request at c=1 waits 1 ms, as MLServer's
  (contenders.MLSERVER_MAX_BATCH_TIME_S);
- `accelerator="cpu"`, `workers_per_device=1`, `num_api_servers=None` (as many HTTP
  server processes as inference workers, "recommended" in LitServer.run's docstring):
  one uvicorn process and one inference process, beside the launcher;
- `fast_queue=False` (default), and `generate_client_file=False` only so that it does
  not write client.py into the working directory.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import litserve as ls
import numpy as np
from models import W1, W1_OUTPUT, W2, W2_OUTPUT, decode_w1, decode_w2, oip_response

MAX_BATCH_SIZE = 64
BATCH_TIMEOUT_S = 0.001


class W1API(ls.LitAPI):
    def __init__(self, model_dir: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model_dir = model_dir

    def setup(self, device: str) -> None:
        self.model = W1(self.model_dir)

    # `request` and encode_response's return stay unannotated: LitServe builds the
    # FastAPI endpoint from these annotations (none: the JSON body; server.py
    # _register_api_endpoints), and a string annotation would be read as a query field.
    def decode_request(self, request, **kwargs: Any) -> np.ndarray[Any, Any]:
        return decode_w1(request)

    def batch(self, inputs: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
        return np.concatenate(inputs)

    def predict(self, x: np.ndarray[Any, Any], **kwargs: Any) -> np.ndarray[Any, Any]:
        return self.model(x)

    def unbatch(self, output: np.ndarray[Any, Any]) -> list[np.ndarray[Any, Any]]:
        # one row a request (the table's bodies carry one row each)
        return [output[i : i + 1] for i in range(len(output))]

    def encode_response(self, output: np.ndarray[Any, Any], **kwargs: Any):
        return oip_response("w1", W1_OUTPUT, output)


class W2API(ls.LitAPI):
    def setup(self, device: str) -> None:
        self.model = W2()

    def decode_request(self, request, **kwargs: Any) -> list[str]:
        return decode_w2(request)

    def batch(self, inputs: list[list[str]]) -> list[str]:
        return [text for texts in inputs for text in texts]

    def predict(self, x: list[str], **kwargs: Any) -> np.ndarray[Any, Any]:
        return self.model(x)

    def unbatch(self, output: np.ndarray[Any, Any]) -> list[np.ndarray[Any, Any]]:
        return [output[i : i + 1] for i in range(len(output))]

    def encode_response(self, output: np.ndarray[Any, Any], **kwargs: Any):
        return oip_response("w2", W2_OUTPUT, output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=("w1", "w2"))
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    settings: dict[str, Any] = {
        "max_batch_size": MAX_BATCH_SIZE,
        "batch_timeout": BATCH_TIMEOUT_S,
        "api_path": f"/v2/models/{args.workload}/infer",
    }
    api = W1API(args.model_dir, **settings) if args.workload == "w1" else W2API(**settings)
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=1)
    server.run(host="127.0.0.1", port=args.port, generate_client_file=False)


if __name__ == "__main__":
    main()
