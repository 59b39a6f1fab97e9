"""How long a `podserve serve` process takes to exit after SIGTERM, and after its drain
completed (issue 15 item 10, issue 16 item 6: the target is 0.2 s from "drain complete"
to exit).

    python benchmarks/exit_tail.py [--runs 3] [--models iris,tiny-lm] [--idle-connections 20]

Per run: start a replica, wait for /ready, optionally open idle keep-alive HTTP
connections and a gRPC channel (what a load balancer and clients leave open), send
SIGTERM with nothing in flight, and time SIGTERM → exit and "drain complete" (its log
timestamp, millisecond resolution) → exit. Results: stdout and
benchmarks/results/exit-tail-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc
import harness


def idle_connections(port: int, count: int) -> list[socket.socket]:
    """Keep-alive connections that each sent one request and then went quiet."""
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.recv(65536)
        sockets.append(sock)
    return sockets


def one_run(repo: Path, log_dir: Path, index: int, idle: int) -> dict[str, Any]:
    replica = harness.Replica(f"exit-{index}", repo, log_dir).start()
    channel = None
    sockets: list[socket.socket] = []
    try:
        replica.wait_ready()
        sockets = idle_connections(replica.http_port, idle)
        channel = grpc.insecure_channel(f"127.0.0.1:{replica.grpc_port}")
        grpc.channel_ready_future(channel).result(timeout=30)
        replica.sigterm()
        code = replica.wait_exit(60)
        exit_wall_s = time.time()
    finally:
        for sock in sockets:
            sock.close()
        if channel is not None:
            channel.close()
        replica.stop()
    assert replica.sigterm_s is not None
    assert replica.exit_s is not None
    drained = [r for r in replica.log_records() if r.get("msg") == "drain complete; exiting"]
    after_drain_s = None
    if drained:
        stamp = dt.datetime.strptime(drained[0]["ts"], "%Y-%m-%dT%H:%M:%S.%fZ")
        drained_wall_s = stamp.replace(tzinfo=dt.UTC).timestamp()
        after_drain_s = round(exit_wall_s - drained_wall_s, 3)
    return {
        "exit_code": code,
        "sigterm_to_exit_s": round(replica.exit_s - replica.sigterm_s, 3),
        "drain_complete_to_exit_s": after_drain_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--models", default="iris,tiny-lm")
    parser.add_argument("--idle-connections", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repo = harness.repository(root / "models", tuple(args.models.split(",")))
        runs = [one_run(repo, root, i, args.idle_connections) for i in range(args.runs)]
    exits = [r["sigterm_to_exit_s"] for r in runs]
    report = {
        "models": args.models,
        "idle_connections": args.idle_connections,
        "runs": runs,
        "sigterm_to_exit_s_median": statistics.median(exits),
        "sigterm_to_exit_s_max": max(exits),
    }
    for run in runs:
        print(run)
    print(
        f"SIGTERM -> exit: median {report['sigterm_to_exit_s_median']} s, "
        f"max {report['sigterm_to_exit_s_max']} s"
    )
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    harness.write_report(harness.RESULTS / f"exit-tail-{stamp}.json", report)
    return 0 if all(r["exit_code"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
