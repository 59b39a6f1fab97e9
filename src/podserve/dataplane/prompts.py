"""A prompt's size bounded before it is tokenized, and tokenization off the event loop
(issue 15 item 1: one 20 MB prompt kept `/healthz` from answering for 21 s).

Bound: a token covers at most a few characters (GPT-2-style BPE averages about 4; the
longest tokens of common vocabularies are runs of whitespace or code of a few dozen), so
a prompt of more than `MAX_CHARS_PER_TOKEN` characters per token of context can never
fit, whatever it tokenizes to, and is refused with a 400 before any tokenizer runs. The
multiple is generous on purpose: a prompt the bound lets through but that does not fit
is still refused after tokenizing (by the engine's own context check), so the bound
only has to be safe, never tight. Chat messages count their contents and roles.

Tokenizing (and applying a chat template) costs time in proportion to the text, so it
runs on one dedicated thread per data plane: the event loop keeps answering probes and
other requests meanwhile. One thread, not a pool: Hugging Face fast tokenizers refuse
concurrent calls that change their truncation state ("Already borrowed",
huggingface/tokenizers#537), and one worker keeps calls ordered.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from podserve.core.errors import InvalidInput

MAX_CHARS_PER_TOKEN = 64

Arg = TypeVar("Arg")


def check_prompt_size(
    prompt: str | None, messages: Sequence[Mapping[str, str]] | None, max_context: int
) -> None:
    """Raise InvalidInput when the prompt has too many characters to fit `max_context`
    tokens, without tokenizing it."""
    if messages is not None:
        chars = sum(len(part) for m in messages for part in m.values())
        what = "the chat messages hold"
    else:
        chars = len(prompt or "")
        what = "the prompt has"
    limit = max_context * MAX_CHARS_PER_TOKEN
    if chars > limit:
        raise InvalidInput(
            f"{what} {chars} characters; the model's context of {max_context} tokens fits "
            f"at most {limit} ({MAX_CHARS_PER_TOKEN} per token, refused without tokenizing)"
        )


class Tokenizing:
    """The data plane's one tokenizer thread."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="podserve-tokenize"
        )

    async def run(self, encode: Callable[[Arg], list[int]], arg: Arg) -> list[int]:
        return await asyncio.get_running_loop().run_in_executor(self._pool, encode, arg)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
