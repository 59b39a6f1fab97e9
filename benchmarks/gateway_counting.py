"""The gateway's prompt count on multi-turn chats: with the count cache and without it.

    python benchmarks/gateway_counting.py [--conversations 40] [--turns 20] [--rounds 3]

A chat client resends the whole conversation every turn. This replays `--conversations`
conversations of `--turns` turns (a 2,000-character system prompt; user messages of
200-1,500 characters, replies of 400-2,000, random but the same for both sides) through
`PromptCounting` with tiny-lm's real tokenizer, as `Accounting.admit` calls it before a
request is forwarded: the time each turn waits for its count (the latency the gateway
adds to that request) and this process's CPU per turn. Cached (the default
`CACHE_CHARS`) and uncached (`cache_chars=0`) alternate in every round, conversations
interleaved turn by turn as concurrent users would send them.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

from podserve.gateway.counting import PromptCounting
from podserve.gateway.tokens import TokenizerCount

TOKENIZER = harness.REPO_ROOT / "examples" / "models" / "tiny-lm" / "tokenizer.json"
WORDS = [
    "the",
    "model",
    "returns",
    "a",
    "value",
    "when",
    "the",
    "function",
    "is",
    "called",
    "with",
    "its",
    "argument",
    "list",
]


def _text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


def conversations(count: int, turns: int, seed: int = 7) -> list[list[list[str]]]:
    """Per conversation, the message texts each turn sends (the history so far)."""
    rng = random.Random(seed)
    system = _text(rng, 2000)
    out = []
    for _ in range(count):
        history = [system]
        sent = []
        for _ in range(turns):
            history.append(_text(rng, rng.randint(200, 1500)))
            sent.append(list(history))
            history.append(_text(rng, rng.randint(400, 2000)))
        out.append(sent)
    return out


async def replay(chats: list[list[list[str]]], cache_chars: int | None) -> dict[str, Any]:
    counter = TokenizerCount(TOKENIZER)
    counting = (
        PromptCounting({"m": counter})
        if cache_chars is None
        else PromptCounting({"m": counter}, cache_chars=cache_chars)
    )
    waits: list[float] = []
    tokens = 0
    cpu0 = time.process_time()
    wall0 = time.perf_counter()
    try:
        for turn in range(len(chats[0])):
            for chat in chats:
                started = time.perf_counter()
                tokens += await counting.count("m", chat[turn])
                waits.append(time.perf_counter() - started)
    finally:
        counting.close()
    turns = len(waits)
    return {
        "turns": turns,
        "tokens": tokens,
        "wait_p50_ms": round(statistics.median(waits) * 1000, 3),
        "wait_p99_ms": round(sorted(waits)[int(turns * 0.99)] * 1000, 3),
        "cpu_us_per_turn": round((time.process_time() - cpu0) / turns * 1e6, 1),
        "wall_s": round(time.perf_counter() - wall0, 2),
        "cache_hits": counting.cache_hits,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=40)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    chats = conversations(args.conversations, args.turns)
    asyncio.run(replay(chats[:2], None))  # load the tokenizer, warm both paths
    rounds = []
    for i in range(args.rounds):
        row = {}
        for side in ("cached", "uncached") if i % 2 == 0 else ("uncached", "cached"):
            row[side] = asyncio.run(replay(chats, None if side == "cached" else 0))
        # the cache must not change a single count
        assert row["cached"]["tokens"] == row["uncached"]["tokens"], row
        row["wait_p50_ratio_uncached_over_cached"] = round(
            row["uncached"]["wait_p50_ms"] / row["cached"]["wait_p50_ms"], 1
        )
        row["cpu_ratio_uncached_over_cached"] = round(
            row["uncached"]["cpu_us_per_turn"] / row["cached"]["cpu_us_per_turn"], 1
        )
        print(json.dumps(row), flush=True)
        rounds.append(row)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    report = {"args": vars(args), "rounds": rounds}
    harness.write_report(harness.RESULTS / f"gateway-counting-{stamp}.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
