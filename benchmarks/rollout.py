"""Rolling restart behind a real HAProxy: does a Deployment's replacement of every replica
lose a request or cut a stream?

    python benchmarks/rollout.py [--replicas 2] [--prestop-s 3] [--propagation-s 1]
                                 [--variants endpoint-removal,no-prestop,health-check,retries]

Two (or three) `podserve serve` replicas serve `iris` (OIP v2 over REST and gRPC) and
`tiny-lm` (OpenAI completions streamed over SSE) behind HAProxy (Debian's `haproxy`; the
script writes the config and starts it), under steady load of all three kinds. Each
replica is replaced in turn the way a Deployment with `maxSurge: 1, maxUnavailable: 0`
does it: the replacement is started and waited for until `/ready`, it gets a server slot;
then the old pod's deletion starts, which in Kubernetes does two things at once
(https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination):
the endpoint is removed (reaching each load balancer after a propagation delay) and the
preStop hook runs, after which the kubelet sends SIGTERM. Variants:

* `endpoint-removal`: the slot goes to `maint` through HAProxy's runtime API
  (`set server <backend>/<server> state maint` on the stats socket,
  https://docs.haproxy.org/2.6/management.html#9.3-set%20server) `--propagation-s` after
  deletion starts; SIGTERM follows the preStop sleep. This is what podserve's rendered
  manifests do (preStop sleep longer than endpoint propagation).
* `no-prestop`: the same, without a preStop sleep: SIGTERM at once, endpoint removal
  still propagating.
* `health-check`: nobody tells the proxy; it finds out from its `/ready` checks
  (`option httpchk`, `inter 1s fall 2`), the only signal a plain TCP/HTTP load balancer
  without endpoint watching has.
* `retries`: `health-check` plus L7 retries (`retry-on 503 conn-failure empty-response`,
  `retries 3`, `option redispatch`): a 503 from a draining pod, which comes before the
  first byte of the response, is sent again to another server.

Per variant it reports requests, failures by reason and cut streams for each protocol,
each old replica's exit code and SIGTERM-to-exit time. Results: stdout and
benchmarks/results/rollout-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness

SLOTS = 4  # two or three live replicas plus a surge slot, reused round-robin


@dataclass(frozen=True)
class Variant:
    name: str
    endpoint_removal: bool  # the runtime API takes the slot out (Kubernetes endpoints)
    prestop: bool
    retries: bool


VARIANTS = {
    "endpoint-removal": Variant("endpoint-removal", True, True, False),
    "no-prestop": Variant("no-prestop", True, False, False),
    "health-check": Variant("health-check", False, True, False),
    "retries": Variant("retries", False, True, True),
}


def haproxy_config(
    sock: Path, http_port: int, grpc_port: int, slots: list[harness.Replica | None], v: Variant
) -> str:
    retry = (
        "    retry-on 503 conn-failure empty-response\n    retries 3\n    option redispatch 1\n"
        if v.retries
        else "    retries 0\n"
    )
    http_servers, grpc_servers = [], []
    for i, replica in enumerate(slots):
        if replica is None:  # a slot for a surge replica: no address yet
            http_servers.append(f"    server s{i} 127.0.0.1:1 check disabled")
            grpc_servers.append(
                f"    server s{i} 127.0.0.1:1 proto h2 check port 1 check-proto h1 disabled"
            )
            continue
        http_servers.append(f"    server s{i} 127.0.0.1:{replica.http_port} check")
        grpc_servers.append(
            f"    server s{i} 127.0.0.1:{replica.grpc_port} proto h2 "
            f"check port {replica.http_port} check-proto h1"
        )
    checks = (
        "    option httpchk GET /ready\n    http-check expect status 200\n"
        "    default-server inter 1s fall 2 rise 1\n"
    )
    return (
        "global\n"
        f"    stats socket {sock} mode 600 level admin\n"
        "    maxconn 4000\n"
        "defaults\n"
        "    mode http\n"
        "    timeout connect 1s\n"
        "    timeout client 60s\n"
        "    timeout server 60s\n"
        "    option http-buffer-request\n"
        "frontend http_in\n"
        f"    bind 127.0.0.1:{http_port}\n"
        "    default_backend pods\n"
        "frontend grpc_in\n"
        f"    bind 127.0.0.1:{grpc_port} proto h2\n"
        "    default_backend grpc_pods\n"
        "backend pods\n"
        "    balance roundrobin\n"
        f"{checks}{retry}" + "\n".join(http_servers) + "\n"
        "backend grpc_pods\n"
        "    balance roundrobin\n"
        f"{checks}{retry}" + "\n".join(grpc_servers) + "\n"
    )


class HAProxy:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.sock = workdir / "haproxy.sock"
        self.http_port = harness.free_port()
        self.grpc_port = harness.free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, slots: list[harness.Replica | None], variant: Variant) -> None:
        config = self.workdir / "haproxy.cfg"
        config.write_text(haproxy_config(self.sock, self.http_port, self.grpc_port, slots, variant))
        log = (self.workdir / "haproxy.log").open("ab")
        self.process = subprocess.Popen(
            ["haproxy", "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        deadline = time.monotonic() + 10
        while not self.sock.exists():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"haproxy did not start: see {self.workdir}/haproxy.log")
            time.sleep(0.05)

    def command(self, line: str) -> str:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(self.sock))
            conn.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        answer = b"".join(chunks).decode().strip()
        if any(word in answer for word in ("No such", "Unknown", "Require", "nvalid", "annot")):
            raise RuntimeError(f"haproxy {line!r}: {answer}")
        return answer

    def assign(self, slot: int, replica: harness.Replica) -> None:
        for backend, port in (("pods", replica.http_port), ("grpc_pods", replica.grpc_port)):
            self.command(f"set server {backend}/s{slot} addr 127.0.0.1 port {port}")
        self.command(f"set server grpc_pods/s{slot} check-port {replica.http_port}")
        for backend in ("pods", "grpc_pods"):
            self.command(f"set server {backend}/s{slot} state ready")

    def remove(self, slot: int) -> None:
        for backend in ("pods", "grpc_pods"):
            self.command(f"set server {backend}/s{slot} state maint")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


async def replace(
    lb: HAProxy,
    slots: list[harness.Replica | None],
    index: int,
    new: harness.Replica,
    variant: Variant,
    args: argparse.Namespace,
) -> dict[str, Any]:
    old = slots[index]
    assert old is not None
    event: dict[str, Any] = {"old": old.name, "new": new.name}
    new.start()
    event["new_ready_s"] = round(await asyncio.to_thread(new.wait_ready), 2)
    spare = slots.index(None)
    slots[spare] = new
    lb.assign(spare, new)
    # Deletion starts: endpoint removal and preStop run at the same time.
    deletion_s = time.monotonic()

    async def endpoint_removal() -> None:
        if variant.endpoint_removal:
            await asyncio.sleep(args.propagation_s)  # endpoints → kube-proxy/LB delay
            lb.remove(index)

    async def prestop_then_sigterm() -> int:
        if variant.prestop:
            await asyncio.sleep(args.prestop_s)  # the preStop sleep hook
        old.sigterm()
        return await asyncio.to_thread(old.wait_exit, args.grace_s)

    _, code = await asyncio.gather(endpoint_removal(), prestop_then_sigterm())
    if not variant.endpoint_removal:
        lb.remove(index)  # the pod object is gone; a real LB drops it on its next sync
    slots[index] = None
    assert old.sigterm_s is not None
    assert old.exit_s is not None
    event["exit_code"] = code
    event["sigterm_to_exit_s"] = round(old.exit_s - old.sigterm_s, 2)
    event["deletion_to_exit_s"] = round(old.exit_s - deletion_s, 2)
    drain = [r for r in old.log_records() if "drain" in str(r.get("msg", ""))]
    event["drain_log"] = [
        {k: r[k] for k in ("ts", "msg", "inflight", "cut_requests") if k in r} for r in drain
    ]
    done = [r for r in drain if "complete" in str(r.get("msg", ""))]
    if done and old.sigterm_wall_s is not None:
        # The exit tail: from "drain complete" to the process being gone.
        done_s = dt.datetime.fromisoformat(str(done[0]["ts"]).replace("Z", "+00:00")).timestamp()
        event["drain_complete_after_sigterm_s"] = round(done_s - old.sigterm_wall_s, 2)
        event["exit_after_drain_complete_s"] = round(
            event["sigterm_to_exit_s"] - (done_s - old.sigterm_wall_s), 2
        )
    return event


async def run_variant(variant: Variant, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    logs = workdir / variant.name
    logs.mkdir()
    repo = harness.repository(workdir / "repo", ("iris", "tiny-lm"))
    extra = ("--drain-timeout-s", str(args.drain_timeout_s))
    serial = iter(range(1000))
    initial = [
        harness.Replica(f"r{next(serial)}", repo, logs, extra=extra).start()
        for _ in range(args.replicas)
    ]
    for replica in initial:
        await asyncio.to_thread(replica.wait_ready)
    slots: list[harness.Replica | None] = [*initial, *[None] * (SLOTS - len(initial))]
    lb = HAProxy(logs)
    lb.start(slots, variant)
    base = f"http://127.0.0.1:{lb.http_port}"
    tallies = {"rest": harness.Tally(), "grpc": harness.Tally(), "sse": harness.Tally()}
    stop = asyncio.Event()
    clients = [
        *(harness.rest_loop(base, tallies["rest"], stop, pause_s=0.005) for _ in range(4)),
        *(
            harness.grpc_loop(f"127.0.0.1:{lb.grpc_port}", tallies["grpc"], stop, pause_s=0.005)
            for _ in range(2)
        ),
        *(
            harness.sse_loop(base, tallies["sse"], stop, max_tokens=args.stream_tokens)
            for _ in range(args.streams)
        ),
    ]
    load = asyncio.gather(*clients)
    events = []
    try:
        await asyncio.sleep(args.warm_s)  # steady load before the first replacement
        for old in initial:
            index = slots.index(old)
            new = harness.Replica(f"r{next(serial)}", repo, logs, extra=extra)
            events.append(await replace(lb, slots, index, new, variant, args))
            print(f"  {variant.name}: replaced {events[-1]}", flush=True)
        await asyncio.sleep(args.settle_s)
    finally:
        stop.set()
        await load
        lb.stop()
        for replica in slots:
            if replica is not None:
                replica.stop()
    return {
        "variant": variant.name,
        "settings": {
            "endpoint_removal": variant.endpoint_removal,
            "prestop_s": args.prestop_s if variant.prestop else 0,
            "propagation_s": args.propagation_s if variant.endpoint_removal else None,
            "retries": variant.retries,
        },
        "traffic": {kind: tally.summary() for kind, tally in tallies.items()},
        "failed_requests": tallies["rest"].failed + tallies["grpc"].failed,
        "failed_streams": tallies["sse"].failed,
        "cut_streams": tallies["sse"].outcomes["sse:cut"],
        "replacements": events,
    }


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| variant | REST ok/total | gRPC ok/total | SSE ok/total | failed requests | "
        "failed streams (cut) | old pods' exit codes |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        t = r["traffic"]
        cells = [f"{t[k]['ok']}/{t[k]['total']}" for k in ("rest", "grpc", "sse")]
        codes = ",".join(str(e["exit_code"]) for e in r["replacements"])
        lines.append(
            f"| {r['variant']} | {' | '.join(cells)} | {r['failed_requests']} | "
            f"{r['failed_streams']} ({r['cut_streams']}) | {codes} |"
        )
    for r in results:
        reasons = {k: v["by_outcome"] for k, v in r["traffic"].items() if v["failed"]}
        if reasons:
            lines.append(f"\n{r['variant']} failures: {reasons}")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> int:
    if shutil.which("haproxy") is None:
        print("rollout.py needs haproxy (apt-get install haproxy)", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="podserve-rollout-"))
    results = []
    for name in args.variants.split(","):
        print(f"variant {name} ...", flush=True)
        results.append(await run_variant(VARIANTS[name], args, workdir))
    report = {
        "benchmark": "rollout",
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "args": vars(args),
        "logs": str(workdir),
        "results": results,
    }
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = harness.RESULTS / f"rollout-{stamp}.json"
    harness.write_report(out, report)
    print(table(results))
    print(f"\nreport: {out}\nlogs: {workdir}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, choices=(2, 3), default=2)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--prestop-s", type=float, default=3.0)
    parser.add_argument("--propagation-s", type=float, default=1.0)
    parser.add_argument("--drain-timeout-s", type=float, default=30.0)
    parser.add_argument("--grace-s", type=float, default=60.0, help="SIGKILL after this")
    parser.add_argument("--streams", type=int, default=4, help="concurrent SSE clients")
    parser.add_argument("--stream-tokens", type=int, default=96)
    parser.add_argument("--warm-s", type=float, default=3.0)
    parser.add_argument("--settle-s", type=float, default=3.0)
    args = parser.parse_args()
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {sorted(VARIANTS)}")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
