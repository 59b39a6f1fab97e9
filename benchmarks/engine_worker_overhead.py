"""What `generation.served.EngineWorker` adds per token: one stream of N token events
read directly from an engine's stream, then through the worker's tracked stream, in one
run (a ratio and a per-token difference, never an absolute target).

    python benchmarks/engine_worker_overhead.py [--tokens 200000]

The engine here is an in-memory stream (no model), so the difference is the wrapper's
whole cost: one more `__anext__` and a clock read per token. The tiny LM's decode step
costs milliseconds per token; compare the two.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence

from podserve.config.model_config import ModelConfig
from podserve.core.clock import MONOTONIC
from podserve.generation.client import TokenStream
from podserve.generation.engine import EngineStats
from podserve.generation.sampling import SamplingParams
from podserve.generation.served import EngineWorker
from podserve.generation.stream import TokenEvent

EVENT = TokenEvent(65, "A")


class _Stream:
    def __init__(self, tokens: int) -> None:
        self._left = tokens

    def __aiter__(self) -> AsyncIterator[TokenEvent]:
        return self

    async def __anext__(self) -> TokenEvent:
        if self._left == 0:
            raise StopAsyncIteration
        self._left -= 1
        return EVENT

    def close(self) -> None:
        self._left = 0


class _Engine:
    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    @property
    def max_context(self) -> int:
        return 1 << 30

    def encode_prompt(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def encode_chat(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        return []

    def token_text(self, token_id: int) -> str:
        return chr(token_id)

    def admit(
        self, prompt_ids: Sequence[int], sequences: Sequence[SamplingParams]
    ) -> list[TokenStream]:
        return [_Stream(self.tokens) for _ in sequences]

    def stats(self) -> EngineStats:
        return EngineStats(0, 0, 0.0, 0, 0, 0)

    def close(self) -> None:
        pass


async def _drain(stream: TokenStream) -> float:
    started = time.perf_counter()
    async for _ in stream:
        pass
    return time.perf_counter() - started


async def main(tokens: int) -> None:
    engine = _Engine(tokens)
    worker = EngineWorker(
        config=ModelConfig(name="bench", runtime="bench"),
        client=engine,
        max_queue=1,
        clock=MONOTONIC,
    )
    params = [SamplingParams()]
    direct = min([await _drain(engine.admit([1], params)[0]) for _ in range(3)])
    wrapped = min([await _drain(worker.admit([1], params)[0]) for _ in range(3)])
    print(f"tokens per stream: {tokens}")
    print(f"direct:  {direct / tokens * 1e6:.3f} us/token")
    print(f"wrapped: {wrapped / tokens * 1e6:.3f} us/token")
    print(f"added:   {(wrapped - direct) / tokens * 1e6:.3f} us/token ({wrapped / direct:.2f}x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=200_000)
    asyncio.run(main(parser.parse_args().tokens))
