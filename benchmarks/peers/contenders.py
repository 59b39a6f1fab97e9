"""How benchmarks/table.py starts the peer servers as contenders: each from its own venv
(benchmarks/.peer-venvs/<peer>, made by make_venvs.sh), on free ports, answering the same
OIP v2 JSON bodies at `/v2/models/{w1,w2}/infer`, with its CPU read over the whole
process tree (MLServer and LitServe run inference in child processes).

Runs in the project's venv: it only builds commands and reads /proc.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import servers

PEERS_DIR = Path(__file__).resolve().parent
VENVS = PEERS_DIR.parent / ".peer-venvs"
PEERS = ("kserve", "litserve", "mlserver")
# The rows of issue 16's table, by peer.
LABELS = {
    "kserve": "KServe 0.21 (kserve ModelServer)",
    "litserve": "LitServe 0.2.19, batching",
    "mlserver": "MLServer 1.7.1, adaptive batching",
}
# Batching, where the peer has it: podserve's W1/W2 max_batch_size (64). The wait for
# company is each peer's own documented setting; see the server scripts.
MAX_BATCH_SIZE = 64
# MLServer's adaptive batching has no default: it is off until max_batch_size > 1 and
# max_batch_time > 0 (mlserver/batching/hooks.py load_batching), and its docs say to find
# the values by experiment. The batcher waits up to max_batch_time for company even for
# a lone request (mlserver/batching/adaptive.py _batch_requests), so c=1 pays it: 1 ms,
# small beside W2's model call and as near podserve's no-wait as MLServer allows.
MLSERVER_MAX_BATCH_TIME_S = 0.001


def python(peer: str) -> str:
    path = VENVS / peer / "bin" / "python"
    if not path.exists():
        raise RuntimeError(f"no venv for {peer}: run bash benchmarks/peers/make_venvs.sh {peer}")
    return str(path)


def start(
    peer: str, models: dict[str, Path], scratch: Path, logs: Path
) -> dict[str, servers.ServerProcess]:
    """The (not yet entered) servers of `peer` by workload: one process serving both
    workloads for KServe and MLServer, one per workload for LitServe (one API a server)."""
    env = {"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(PEERS_DIR)}
    if peer == "litserve":
        found = {}
        for workload, model_dir in models.items():
            port = servers.free_port()
            command = [python(peer), str(PEERS_DIR / "litserve_server.py")]
            command += [workload, str(model_dir), "--port", str(port)]
            name = f"litserve-{workload}"
            found[workload] = servers.ServerProcess(
                name, command, port, "/health", logs / f"{name}.log", env=env, process_group=True
            )
        return found
    port = servers.free_port()
    if peer == "kserve":
        command = [python(peer), str(PEERS_DIR / "kserve_server.py"), "--http_port", str(port)]
        command += ["--grpc_port", str(servers.free_port())]
        command += [f"--{w}_dir={d}" for w, d in models.items()]
    elif peer == "mlserver":
        settings = mlserver_settings(scratch / "mlserver", models, port)
        command = [str(VENVS / peer / "bin" / "mlserver"), "start", str(settings)]
    else:
        raise ValueError(f"unknown peer {peer!r}; known: {', '.join(PEERS)}")
    server = servers.ServerProcess(
        peer, command, port, "/v2/health/ready", logs / f"{peer}.log", env=env, process_group=True
    )
    return dict.fromkeys(models, server)


def mlserver_settings(root: Path, models: dict[str, Path], port: int) -> Path:
    """settings.json and one model-settings.json per workload, as MLServer reads a folder
    (docs: https://mlserver.readthedocs.io/en/latest/reference/settings.html and
    .../model-settings.html). Adaptive batching: `max_batch_size` and `max_batch_time`
    (seconds) per model; MLServer's defaults leave `parallel_workers` at 1 (inference in
    one worker process beside the HTTP process), kept as shipped."""
    root.mkdir(parents=True)
    settings = {
        "http_port": port,
        "grpc_port": servers.free_port(),  # REST is measured; gRPC only needs a free port
        "metrics_port": servers.free_port(),
        "debug": False,
    }
    (root / "settings.json").write_text(json.dumps(settings))
    for workload, model_dir in models.items():
        directory = root / workload
        directory.mkdir()
        model = {
            "name": workload,
            "max_batch_size": MAX_BATCH_SIZE,
            "max_batch_time": MLSERVER_MAX_BATCH_TIME_S,
        }
        if workload == "w1":
            # The joblib MLP fits the stock scikit-learn runtime: it joblib.loads `uri`
            # and answers `predict` (mlserver_sklearn/sklearn.py).
            model["implementation"] = "mlserver_sklearn.SKLearnModel"
            model["parameters"] = {"uri": str(model_dir / "model.joblib")}
        else:
            model["implementation"] = "mlserver_models.EmbeddingModel"
        (directory / "model-settings.json").write_text(json.dumps(model))
    return root


def tree_cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` and all its live descendants (children found through
    /proc/<pid>/task/<tid>/children), so a server that infers in child processes is
    charged for them too. A child that exited meanwhile is not counted (none does while
    a peer serves)."""
    from table_measure import cpu_seconds

    total, stack, seen = 0.0, [pid], set()
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            total += cpu_seconds(current)
            tasks = os.listdir(f"/proc/{current}/task")
        except (FileNotFoundError, ProcessLookupError):
            continue
        for tid in tasks:
            try:
                children = Path(f"/proc/{current}/task/{tid}/children").read_text().split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            stack.extend(int(child) for child in children)
    return total
