"""Generation against real anchors (issue 16, item 4), on the bundled tiny LM, in one run:
32 prompts x 64 new tokens, greedy, every method doing the same work.

    python benchmarks/generation_anchors.py [--rounds 1] [--out benchmarks/results]

1. sequential `model.generate`, one prompt at a time;
2. one static padded `model.generate` over all 32 (left padding): the upper bound for work
   of equal length, since every step is one forward of all 32 rows;
3. transformers' own continuous-batching manager (`init_continuous_batching`, started once
   before the clock starts, with `num_blocks`/`page_size`/`max_batch_tokens` set: without
   them it sizes its cache from RAM, 7 GB here; see transformers'
   src/transformers/generation/continuous_batching/continuous_api.py);
4. podserve's `GenerationEngine` in process (the same scheduler settings as the bundled
   model.yaml);
5. podserve through HTTP: `podserve serve` with the bundled model, 32 concurrent streams
   on /v1/completions from the load generator's raw asyncio client.

Then the late-request TTFT: requests arriving while 16 long streams decode (half the slots,
as benchmarks/llm.py measures it), against requests on an idle engine, in process and
through HTTP. Every method generates exactly 64 tokens a prompt
(EOS ignored), which the script checks. Goals: podserve in process ≥ the transformers
manager and ≥ 0.8x static; through HTTP ≥ 0.8x in process; late TTFT ≤ 3x idle.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers

from podserve.bench.client import run as run_async
from podserve.bench.loop import Budget
from podserve.bench.sweep import BenchPlan, run_plan
from podserve.bench.wire import encode_request
from podserve.bench.workloads import PreparedRequest, Target

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "models" / "tiny-lm"
RESULTS_DIR = ROOT / "benchmarks" / "results"
PROMPTS = 32
# The late probes arrive at spread offsets (0 to 5 ms, about one decode step of the 16
# background streams), one after another. Sent back to back, each probe was submitted
# just after the previous one's token left, which is just after a step began: every probe
# then waited a whole step before its own, the worst case rather than a typical arrival
# (measured: 10.5-12.0 ms back to back against 6.1 ms for a probe sent 50 ms after the
# last). Fixed offsets, so every run sees the same arrivals.
ARRIVALS = tuple(enumerate((0.0, 0.0025, 0.0012, 0.0037, 0.0006, 0.0043, 0.0019, 0.0031, 0.0049)))
NEW_TOKENS = 64
STEMS = (
    "Return a list of the",
    "The function returns",
    "Process the given",
    "What does json.dumps do?",
    "Create a new dictionary from the keys of",
    "Raise ValueError if the argument is not a valid",
    "Open the file and read",
    "Compute the hash of the object and",
)


def prompt_texts() -> list[str]:
    """32 prompts of 4 to about 40 tokens: the stems, repeated 1 to 4 times."""
    return [" ".join([STEMS[i % len(STEMS)]] * (1 + i // len(STEMS))) for i in range(PROMPTS)]


# -- the anchors ---------------------------------------------------------------------------------
def sequential(model: Any, prompts: list[list[int]], config: Any) -> tuple[float, int]:
    import torch

    start, tokens = time.perf_counter(), 0
    for ids in prompts:
        with torch.inference_mode():
            out = model.generate(
                input_ids=torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                generation_config=config,
            )
        tokens += out.shape[1] - len(ids)
    return time.perf_counter() - start, tokens


def static(model: Any, prompts: list[list[int]], config: Any, pad: int) -> tuple[float, int]:
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    return time.perf_counter() - start, (out.shape[1] - width) * len(prompts)


def transformers_manager(model: Any, prompts: list[list[int]], config: Any) -> tuple[float, int]:
    from transformers import ContinuousBatchingConfig

    cb = ContinuousBatchingConfig(num_blocks=256, page_size=32, max_batch_tokens=512)
    manager = model.init_continuous_batching(
        generation_config=config, continuous_batching_config=cb
    )
    manager.start()
    try:
        # warm-up outside the clock, as a server would have done
        manager.add_request(prompts[0], request_id="warm", max_new_tokens=4)
        manager.get_result(request_id="warm", timeout=60)
        start = time.perf_counter()
        # eos_token_id=-1: no sampled token ends a request (min_new_tokens is not honoured
        # by the manager), so every prompt gets its 64 tokens, as ignore_eos does
        ids = [
            manager.add_request(p, request_id=f"r{i}", max_new_tokens=NEW_TOKENS, eos_token_id=-1)
            for i, p in enumerate(prompts)
        ]
        tokens, done = 0, 0
        while done < len(ids):
            result = manager.get_result(timeout=60)
            if result is None:
                raise RuntimeError("transformers' manager stopped producing results")
            if result.is_finished():
                tokens += len(result.generated_tokens)
                done += 1
        elapsed = time.perf_counter() - start
    finally:
        manager.stop(block=True, timeout=10)
    return elapsed, tokens


def podserve_engine(prompts: list[list[int]]) -> dict[str, float]:
    from podserve.config.model_config import load_model_config
    from podserve.generation import SamplingParams
    from podserve.generation.loading import load_generator

    loaded = load_generator(load_model_config(TINY))
    engine = loaded.engine
    params = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
    try:
        for _ in engine.submit("warm", prompts[0], SamplingParams(temperature=0, max_tokens=4)):
            pass
        idle = statistics.median(_engine_ttft_ms(engine, prompts[1], f"idle{k}") for k in range(5))
        start = time.perf_counter()
        streams = [engine.submit(f"r{i}", ids, params) for i, ids in enumerate(prompts)]
        tokens = sum(sum(e.token_id is not None for e in s) for s in streams)
        elapsed = time.perf_counter() - start
        # Late requests: arriving while 16 long streams decode (half the 32 slots, so that
        # a slot is free: with all 32 taken, a 33rd waits for one by design).
        long = SamplingParams(temperature=0, max_tokens=256, ignore_eos=True)
        background = [engine.submit(f"bg{i}", prompts[i], long) for i in range(16)]
        for stream in background:  # every background stream has its first token
            next(iter(stream))
        late = statistics.median(
            _engine_ttft_ms(engine, prompts[2], f"late{k}", arrival) for k, arrival in ARRIVALS
        )
        for i in range(16):
            engine.abort(f"bg{i}")
    finally:
        engine.stop()
    return {"seconds": elapsed, "tokens": tokens, "ttft_idle_ms": idle, "ttft_late_ms": late}


def _engine_ttft_ms(engine: Any, prompt: list[int], name: str, arrival_s: float = 0.0) -> float:
    from podserve.generation import SamplingParams

    time.sleep(arrival_s)  # see ARRIVALS
    start = time.perf_counter()
    stream = engine.submit(name, prompt, SamplingParams(temperature=0, max_tokens=1))
    first = next(iter(stream))
    ttft = (time.perf_counter() - start) * 1000
    if first.finish_reason is None:
        list(stream)
    return ttft


# -- through HTTP ------------------------------------------------------------------------------
def completion_body(text: str, max_tokens: int) -> bytes:
    return orjson.dumps(
        {
            "model": "tiny-lm",
            "prompt": text,
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
        }
    )


class Streams:
    """OpenAI completion streams to POST /v1/completions (the Workload protocol)."""

    def __init__(self, bodies: list[bytes]) -> None:
        self.bodies = bodies

    def describe(self) -> str:
        return "completion streams"

    def prepare(self, target: Target, headers: Any) -> list[PreparedRequest]:
        all_headers = {**dict(headers), "Accept": "text/event-stream"}
        return [
            PreparedRequest(
                encode_request("POST", target.authority, "/v1/completions", b, all_headers), True
            )
            for b in self.bodies
        ]


def _step(port: int, bodies: list[bytes], concurrency: int, requests: int) -> Any:
    plan = BenchPlan(
        target=Target("127.0.0.1", port),
        workload=Streams(bodies),
        levels=(float(concurrency),),
        budget=Budget(duration_s=None, requests=requests, warmup_s=0.0, timeout_s=120),
    )
    return run_async(run_plan(plan)).summaries[0]


def _running(port: int) -> float:
    """The server's running sequences, from its Prometheus text."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    for family in text_string_to_metric_families(text):
        if family.name == "vllm:num_requests_running":
            return sum(s.value for s in family.samples)
    return 0.0


def http_run(port: int, texts: list[str]) -> dict[str, float]:
    _step(port, [completion_body(texts[0], 4)], 1, 2)  # warm-up
    idle = _step(port, [completion_body(texts[1], 1)], 1, 5)
    bodies = [completion_body(t, NEW_TOKENS) for t in texts]
    start = time.perf_counter()
    many = _step(port, bodies, PROMPTS, PROMPTS)
    elapsed = time.perf_counter() - start
    # Late requests: probes one at a time while 16 long streams decode (as llm.py does).
    # The 16 streams' client runs in a process of its own: in this one, its event loop
    # would share the GIL with the probes' and add its relaying to their TTFT.
    background = multiprocessing.get_context("spawn").Process(
        target=_step, args=(port, [completion_body(t, 256) for t in texts[:16]], 16, 16)
    )
    background.start()
    deadline = time.monotonic() + 60
    while _running(port) < 16:  # the probes arrive while all 16 decode
        if time.monotonic() > deadline or not background.is_alive():
            raise RuntimeError("the 16 background streams did not start")
        time.sleep(0.02)  # polling the server's gauge, not synchronisation by time
    late_ms = []
    for _, arrival in ARRIVALS:  # one probe at a time, at spread arrival times
        time.sleep(arrival)
        probe = _step(port, [completion_body(texts[2], 1)], 1, 1)
        if probe.ttft_ms:
            late_ms.append(probe.ttft_ms.p50)
    background.join()
    return {
        "seconds": elapsed,
        # every stream asked for 64 tokens with EOS ignored; failed ones are counted apart
        "tokens": float(many.ok * NEW_TOKENS),
        "errors": float(sum(many.errors.values())),
        "ttft_idle_ms": idle.ttft_ms.p50 if idle.ttft_ms else float("nan"),
        "ttft_late_ms": statistics.median(late_ms) if late_ms else float("nan"),
        "client_cores": many.client_cpu_fraction,
    }


# -- the run -----------------------------------------------------------------------------------
def run(rounds: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    torch.set_num_threads(1)  # the bundled model.yaml's torch_threads, for every method
    tokenizer = AutoTokenizer.from_pretrained(TINY, local_files_only=True)
    texts = prompt_texts()
    prompts = [[int(t) for t in tokenizer.encode(x, add_special_tokens=True)] for x in texts]
    model = AutoModelForCausalLM.from_pretrained(TINY, local_files_only=True).eval()
    pad = int(tokenizer.pad_token_id or 0)
    # min_new_tokens = max_new_tokens: exactly 64 tokens a prompt, as ignore_eos does
    config = GenerationConfig(
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS,
        do_sample=False,
        pad_token_id=pad,
        eos_token_id=tokenizer.eos_token_id,
    )
    rows: dict[str, list[dict[str, float]]] = {}

    def add(name: str, seconds: float, tokens: float, **extra: float) -> None:
        rows.setdefault(name, []).append(
            {"seconds": seconds, "tokens": tokens, "tok_s": tokens / seconds, **extra}
        )
        print(f"  {name}: {tokens:.0f} tokens in {seconds:.2f} s = {tokens / seconds:,.0f} tok/s")

    with tempfile.TemporaryDirectory(prefix="podserve-anchors-") as scratch:
        logs = Path(scratch)
        repo = logs / "repo"
        shutil.copytree(TINY, repo / "tiny-lm")
        with servers.podserve("anchors", repo, logs) as server:
            sequential(model, prompts[:2], config)  # warm-up
            for index in range(rounds):
                print(f"round {index + 1} (load {os.getloadavg()[0]:.2f})", flush=True)
                add("sequential model.generate", *sequential(model, prompts, config))
                add("static padded model.generate", *static(model, prompts, config, pad))
                add("transformers CB manager", *transformers_manager(model, prompts, config))
                engine = podserve_engine(prompts)
                add(
                    "podserve engine, in process",
                    engine["seconds"],
                    engine["tokens"],
                    ttft_idle_ms=engine["ttft_idle_ms"],
                    ttft_late_ms=engine["ttft_late_ms"],
                )
                http = http_run(server.port, texts)
                add(
                    "podserve, HTTP, 32 streams",
                    http["seconds"],
                    http["tokens"],
                    ttft_idle_ms=http["ttft_idle_ms"],
                    ttft_late_ms=http["ttft_late_ms"],
                    client_cores=http["client_cores"],
                    errors=http["errors"],
                )
    for name, values in rows.items():
        for value in values:
            expected = PROMPTS * NEW_TOKENS
            if abs(value["tokens"] - expected) > 0.5:
                print(f"WARNING: {name} produced {value['tokens']:.0f} tokens, not {expected}")
    return {"rows": rows, "load_average": os.getloadavg()}


def report(result: dict[str, Any], started: str) -> str:
    rows = result["rows"]

    def tok_s(name: str) -> float:
        return statistics.median(v["tok_s"] for v in rows[name])

    def field(name: str, key: str) -> float:
        return statistics.median(v[key] for v in rows[name])

    engine, http = "podserve engine, in process", "podserve, HTTP, 32 streams"
    lines = [
        f"Run {started}, {PROMPTS} prompts x {NEW_TOKENS} new tokens, greedy, 1 torch thread; "
        f"load average at the end {' '.join(f'{x:.2f}' for x in result['load_average'])}.",
        "",
        "| method | tok/s (median) | rounds |",
        "|---|---|---|",
    ]
    for name, values in rows.items():
        each = ", ".join(f"{v['tok_s']:,.0f}" for v in values)
        lines.append(f"| {name} | {tok_s(name):,.0f} | {each} |")
    checks = [
        (
            "in process ÷ transformers CB manager",
            tok_s(engine) / tok_s("transformers CB manager"),
            1.0,
        ),
        (
            "in process ÷ static padded batch",
            tok_s(engine) / tok_s("static padded model.generate"),
            0.8,
        ),
        ("HTTP 32 streams ÷ in process", tok_s(http) / tok_s(engine), 0.8),
    ]
    lines += ["", "| ratio | measured | goal | result |", "|---|---|---|---|"]
    for name, value, goal in checks:
        lines.append(
            f"| {name} | {value:.2f}x | ≥ {goal:g}x | {'PASS' if value >= goal else 'FAIL'} |"
        )
    for name in (engine, http):
        idle, late = field(name, "ttft_idle_ms"), field(name, "ttft_late_ms")
        ratio = late / idle
        lines.append(
            f"| {name}: late TTFT ÷ idle ({late:.1f} ÷ {idle:.1f} ms) | {ratio:.2f}x | ≤ 3x | "
            f"{'PASS' if ratio <= 3 else 'FAIL'} |"
        )
    lines.append(f"\nHTTP load generator CPU: {field(http, 'client_cores'):.2f} cores.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H-%M-%SZ")
    result = run(args.rounds)
    text = report(result, started)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"anchors-{started}.json").write_bytes(orjson.dumps(result))
    (args.out / f"anchors-{started}.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
