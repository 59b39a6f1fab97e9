"""How long a `podserve serve` process takes to exit after SIGTERM, and after its drain
completed (issue 15 item 10, issue 16 item 6: the target is 0.2 s from "drain complete"
to exit, and 0.2 s from SIGTERM to exit when nothing is in flight).

    python benchmarks/exit_tail.py [--runs 3] [--models iris,tiny-lm] [--idle-connections 20]
                                   [--idle-streams 1]

Per run: start a replica, wait for /ready, optionally open idle keep-alive HTTP
connections, a gRPC channel and idle ModelStreamInfer streams (tritonclient's
`start_stream`; what a load balancer and clients leave open), send
SIGTERM with nothing in flight, and time SIGTERM -> exit. The exit is seen through a
pidfd (readable the moment the process is gone), not `Popen.wait(timeout)`, whose
polling sleeps up to 50 ms. The tail is split with the server's own log timestamps
(wall clock, millisecond resolution):

    sigterm_to_drain_complete_s    the drain (nothing in flight: nearly nothing)
    drain_complete_to_stopped_s    closing listeners and connections, gRPC stop, data
                                   plane close: up to the "server stopped" line
    stopped_to_gone_s              log flush, os._exit, and the kernel releasing the
                                   process (its memory: grows with the resident set)

Each run also records the resident set (and its anonymous part) and thread count at
SIGTERM and the machine's 1-minute load average (the dev machine is shared; a loaded
machine stretches every part), and, right after, the same SIGTERM -> gone for a bare
Python process holding as much touched anonymous memory and leaving with `os._exit`
from its SIGTERM handler: the floor the kernel sets on this machine at this moment
(`bare_floor_s`; `over_floor` is the server's time over it). Both are also given as CPU
seconds used from SIGTERM to gone (`exit_cpu_s`, `bare_floor_cpu_s`, from wait4's
rusage): what the exit costs on a core of its own, which the wall times on a shared,
loaded machine are not. Results: stdout and
benchmarks/results/exit-tail-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc
import harness
import tritonclient.grpc as triton_grpc


def idle_connections(port: int, count: int) -> list[socket.socket]:
    """Keep-alive connections that each sent one request and then went quiet."""
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.recv(65536)
        sockets.append(sock)
    return sockets


def anonymous_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError(f"no Anonymous in smaps_rollup of {pid}")


_BARE = """
import os, signal, sys
held = bytearray({mb} << 20)  # zero-filled, so every page is touched
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
sys.stdout.write("ready\\n")
sys.stdout.flush()
signal.pause()
"""


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a live process has used, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def terminate(proc: subprocess.Popen[bytes]) -> tuple[float, float, int]:
    """SIGTERM `proc` and reap it: (wall seconds until it is gone, seen through a
    pidfd; CPU seconds it used from SIGTERM on, from wait4's rusage; exit code). The CPU
    time is what the exit costs on an idle core; the wall time over it is waiting for a
    core (the dev machine has 2 shared by many)."""
    before_s = _cpu_s(proc.pid)
    pidfd = os.pidfd_open(proc.pid)
    try:
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        gone, _, _ = select.select([pidfd], [], [], 60)
        wall_s = time.monotonic() - start
    finally:
        os.close(pidfd)
    if not gone:
        raise RuntimeError(f"process {proc.pid} still running 60 s after SIGTERM")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return wall_s, usage.ru_utime + usage.ru_stime - before_s, proc.returncode


def bare_exit(mb: int) -> tuple[float, float]:
    """SIGTERM -> gone (wall, CPU s) for a bare Python process holding `mb` of
    anonymous memory."""
    proc = subprocess.Popen([sys.executable, "-c", _BARE.format(mb=mb)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline() != b"ready\n":
            raise RuntimeError("the bare process did not start")
        wall_s, cpu_s, _ = terminate(proc)
        return round(wall_s, 3), round(cpu_s, 3)
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _log_wall_s(records: list[dict[str, Any]], message: str) -> float | None:
    for record in records:
        if record.get("msg") == message:
            stamp = dt.datetime.strptime(record["ts"], "%Y-%m-%dT%H:%M:%S.%fZ")
            return stamp.replace(tzinfo=dt.UTC).timestamp()
    return None


def _gap(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round(end - start, 3)


def one_run(repo: Path, log_dir: Path, index: int, idle: int, streams: int) -> dict[str, Any]:
    replica = harness.Replica(f"exit-{index}", repo, log_dir).start()
    channel = None
    sockets: list[socket.socket] = []
    streamers: list[triton_grpc.InferenceServerClient] = []
    try:
        replica.wait_ready()
        sockets = idle_connections(replica.http_port, idle)
        channel = grpc.insecure_channel(f"127.0.0.1:{replica.grpc_port}")
        grpc.channel_ready_future(channel).result(timeout=30)
        for _ in range(streams):
            client = triton_grpc.InferenceServerClient(f"127.0.0.1:{replica.grpc_port}")
            client.start_stream(callback=lambda result, error: None)
            streamers.append(client)
        rss_mb = harness.rss_bytes(replica.pid) / 2**20
        anon_mb = anonymous_mb(replica.pid)
        threads = len(os.listdir(f"/proc/{replica.pid}/task"))
        load_1m = os.getloadavg()[0]
        assert replica.process is not None
        replica.sigterm_wall_s = time.time()
        wall_s, cpu_s, code = terminate(replica.process)
        gone_wall_s = replica.sigterm_wall_s + wall_s
    finally:
        for sock in sockets:
            sock.close()
        if channel is not None:
            channel.close()
        for client in streamers:
            client.stop_stream()
            client.close()
        replica.stop()
    assert replica.sigterm_wall_s is not None
    records = replica.log_records()
    drained_s = _log_wall_s(records, "drain complete; exiting")
    stopped_s = _log_wall_s(records, "server stopped")
    exit_s = round(wall_s, 3)
    floor_s, floor_cpu_s = bare_exit(anon_mb)
    return {
        "exit_code": code,
        "sigterm_to_exit_s": exit_s,
        "exit_cpu_s": round(cpu_s, 3),
        "bare_floor_s": floor_s,
        "bare_floor_cpu_s": floor_cpu_s,
        "over_floor_s": round(exit_s - floor_s, 3),
        "drain_complete_to_exit_s": _gap(drained_s, gone_wall_s),
        "sigterm_to_drain_complete_s": _gap(replica.sigterm_wall_s, drained_s),
        "drain_complete_to_stopped_s": _gap(drained_s, stopped_s),
        "stopped_to_gone_s": _gap(stopped_s, gone_wall_s),
        "rss_mb": round(rss_mb),
        "anonymous_mb": anon_mb,
        "threads": threads,
        "load_1m": round(load_1m, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--models", default="iris,tiny-lm")
    parser.add_argument("--idle-connections", type=int, default=20)
    parser.add_argument("--idle-streams", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repo = harness.repository(root / "models", tuple(args.models.split(",")))
        runs = [
            one_run(repo, root, i, args.idle_connections, args.idle_streams)
            for i in range(args.runs)
        ]
    exits = [r["sigterm_to_exit_s"] for r in runs]
    after_drain = [r["drain_complete_to_exit_s"] for r in runs if r["drain_complete_to_exit_s"]]
    kernel = [r["stopped_to_gone_s"] for r in runs if r["stopped_to_gone_s"] is not None]
    report = {
        "models": args.models,
        "idle_connections": args.idle_connections,
        "idle_streams": args.idle_streams,
        "runs": runs,
        "sigterm_to_exit_s_median": statistics.median(exits),
        "sigterm_to_exit_s_max": max(exits),
        "drain_complete_to_exit_s_median": statistics.median(after_drain) if after_drain else None,
        "stopped_to_gone_s_median": statistics.median(kernel) if kernel else None,
        "exit_cpu_s_median": statistics.median(r["exit_cpu_s"] for r in runs),
        "bare_floor_s_median": statistics.median(r["bare_floor_s"] for r in runs),
        "bare_floor_cpu_s_median": statistics.median(r["bare_floor_cpu_s"] for r in runs),
        "over_floor_s_median": statistics.median(r["over_floor_s"] for r in runs),
    }
    for run in runs:
        print(run)
    print(
        f"SIGTERM -> exit: median {report['sigterm_to_exit_s_median']} s, "
        f"max {report['sigterm_to_exit_s_max']} s; drain complete -> exit: median "
        f"{report['drain_complete_to_exit_s_median']} s, of which after 'server stopped' "
        f"(flush, os._exit, the kernel releasing memory): {report['stopped_to_gone_s_median']} s; "
        f"a bare process with the same anonymous memory: median {report['bare_floor_s_median']} s"
        f" (server over it: median {report['over_floor_s_median']} s). CPU used from SIGTERM"
        f" to gone: server median {report['exit_cpu_s_median']} s, bare process median "
        f"{report['bare_floor_cpu_s_median']} s"
    )
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    harness.write_report(harness.RESULTS / f"exit-tail-{stamp}.json", report)
    return 0 if all(r["exit_code"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
