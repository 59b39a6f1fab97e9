"""W1 and W2 under KServe 0.21's Python ModelServer, over its OIP v2 REST endpoint
(`POST /v2/models/{name}/infer`, kserve/protocol/rest/v2_endpoints.py).

    python kserve_server.py --http_port PORT --grpc_port PORT --w1_dir DIR [--w2_dir=]

One `kserve.Model` per workload under one `kserve.ModelServer`, as KServe's custom-model
docs write them (a synchronous `predict` taking an `InferRequest`, returning an
`InferResponse`). Settings are KServe's defaults (kserve/model_server.py's parser):
`--workers 1`, gRPC on, latency logging on. KServe's Python server has no batching of
its own: Model.__call__ calls a synchronous `predict` on the event loop, one request at
a time (kserve/model.py); KServe batches with its agent sidecar, outside this process,
which the table does not run.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import kserve
from kserve import InferOutput, InferRequest, InferResponse
from kserve.model_server import parser as kserve_parser
from models import W1, W1_OUTPUT, W2, W2_OUTPUT


def _response(request: InferRequest, name: str, output: Any) -> InferResponse:
    datatype = "INT64" if name == W1_OUTPUT else "FP32"
    tensor = InferOutput(name=name, shape=list(output.shape), datatype=datatype)
    tensor.data = output.ravel().tolist()  # JSON data, as the REST answer carries it
    return InferResponse(
        response_id=request.id or "", model_name=request.model_name, infer_outputs=[tensor]
    )


class W1Model(kserve.Model):
    def __init__(self, model_dir: Path) -> None:
        super().__init__("w1")
        self.model_dir = model_dir

    def load(self) -> bool:
        self.model = W1(self.model_dir)
        self.ready = True
        return self.ready

    def predict(
        self, payload: InferRequest, headers: dict[str, str] | None = None
    ) -> InferResponse:
        return _response(payload, W1_OUTPUT, self.model(payload.inputs[0].as_numpy()))


class W2Model(kserve.Model):
    def __init__(self) -> None:
        super().__init__("w2")

    def load(self) -> bool:
        self.model = W2()
        self.ready = True
        return self.ready

    def predict(
        self, payload: InferRequest, headers: dict[str, str] | None = None
    ) -> InferResponse:
        texts = [str(t) for t in payload.inputs[0].as_numpy().ravel()]
        return _response(payload, W2_OUTPUT, self.model(texts))


def main() -> None:
    # KServe's own flags (ports, workers), plus where W1's model is.
    parser = argparse.ArgumentParser(parents=[kserve_parser], conflict_handler="resolve")
    parser.add_argument("--w1_dir", type=Path)
    parser.add_argument("--w2_dir", type=Path)  # unused: W2 comes from its package
    args, _ = parser.parse_known_args()
    models: list[kserve.Model] = []
    if args.w1_dir:
        models.append(W1Model(args.w1_dir))
    if args.w2_dir:
        models.append(W2Model())
    for model in models:
        model.load()
    kserve.ModelServer(http_port=args.http_port, grpc_port=args.grpc_port).start(models)


if __name__ == "__main__":
    main()
