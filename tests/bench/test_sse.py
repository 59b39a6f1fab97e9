from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from podserve.bench.sse import SseDecoder, TokenStreamMeter

STREAM = (
    b": comment\r\n\r\n"
    b"event: message\r\ndata: one\r\n\r\n"
    b"data: two\ndata: lines\n\n"
    b"id: 3\n\n"
    b"data:three\r\n\r\n"
    b"data: [DONE]\n\n"
)


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=10))
def test_decoder_yields_the_same_events_whatever_the_split(cuts: list[int]) -> None:
    decoder = SseDecoder()
    points = sorted({*cuts, 0, len(STREAM)})
    events = [e for a, b in itertools.pairwise(points) for e in decoder.feed(STREAM[a:b])]
    assert events == [b"one", b"two\nlines", b"three", b"[DONE]"]


def _chunk(content: str) -> bytes:
    return b'data: {"choices":[{"delta":{"content":"' + content.encode() + b'"}}]}\n\n'


def test_meter_times_each_content_chunk_and_prefers_usage() -> None:
    ticks = iter([1.0, 2.0, 3.0, 4.0])
    meter = TokenStreamMeter(clock=lambda: next(ticks))
    meter.feed(b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n')  # no content
    meter.feed(_chunk("a") + _chunk("b"))  # two tokens in one read: same arrival time
    meter.feed(b'data: {"choices":[{"text":"c"}]}\n\n')  # completions API
    assert meter.token_times_s == [2.0, 2.0, 3.0]
    assert meter.output_tokens == 3
    assert not meter.done
    meter.feed(b'data: {"choices":[],"usage":{"completion_tokens":7}}\n\ndata: [DONE]\n\n')
    assert meter.output_tokens == 7
    assert meter.done
