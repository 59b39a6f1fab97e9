"""Presence and frequency penalties: the arithmetic against values worked out by hand,
the counts kept across steps (greedy and sampled rows, penalised and plain rows in one
batch), their rows given back and reused, and the parameters' validation."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from torch import Tensor

torch = pytest.importorskip("torch")

from podserve.core.errors import InvalidInput  # noqa: E402
from podserve.generation.penalties import TokenCounts  # noqa: E402
from podserve.generation.sampling import Sampler, SamplingParams, sample_rows  # noqa: E402
from podserve.protocol.openai.completions import CompletionRequest  # noqa: E402


def test_the_arithmetic_matches_openais_formula_by_hand() -> None:
    counts = TokenCounts()
    a = Sampler(SamplingParams(temperature=0, presence_penalty=0.5, frequency_penalty=1.0))
    # a negative presence penalty raises the tokens already seen
    b = Sampler(SamplingParams(temperature=0, presence_penalty=-1.0, frequency_penalty=0.25))
    counts.penalize(torch.zeros(2, 4), [0, 1], [a, b])  # their first step takes their rows
    for tokens in ([1, 0], [2, 0], [2, 2]):
        counts.record([a, b], tokens)
    counts.record([a], [2])
    # generated so far: a: t1 once, t2 three times; b: t0 twice, t2 once. Row 1 of the
    # step is a sequence without penalties, between the two.
    logits = torch.tensor([[1.0, 2.0, 3.0, 0.5]] * 3)
    counts.penalize(logits, [0, 2], [a, b])
    assert logits.tolist() == [
        [1.0, 2 - 1.0 * 1 - 0.5, 3 - 1.0 * 3 - 0.5, 0.5],  # [1, 0.5, -0.5, 0.5]
        [1.0, 2.0, 3.0, 0.5],
        [1 - 0.25 * 2 + 1.0, 2.0, 3 - 0.25 * 1 + 1.0, 0.5],  # [1.5, 2, 3.75, 0.5]
    ]
    # every row of a step penalised: the same numbers, in place
    both = torch.tensor([[1.0, 2.0, 3.0, 0.5]] * 2)
    counts.penalize(both, [0, 1], [a, b])
    assert both.tolist() == [logits[0].tolist(), logits[2].tolist()]


def steps(samplers: list[Sampler], logits: Tensor, n: int, counts: TokenCounts) -> list[list[int]]:
    """`n` steps of sample_rows over the same logits for every row (a model that always
    predicts the same thing, so only the penalties change the choice)."""
    out = []
    for _ in range(n):
        out.append(sample_rows(samplers, [logits] * len(samplers), counts))
    return out


LOGITS = torch.tensor([3.0, 2.5, 1.25, 0.0])


def test_frequency_penalty_counts_every_repeat_greedy() -> None:
    counts = TokenCounts()
    sampler = Sampler(SamplingParams(temperature=0, frequency_penalty=1.0))
    picks = [row[0] for row in steps([sampler], LOGITS, 6, counts)]
    # scores as (3 - c0, 2.5 - c1, 1.25 - c2, 0 - c3), argmax each step (ties: lowest id):
    # (3, 2.5, 1.25, 0) -> 0; (2, 2.5, ..) -> 1; (2, 1.5, 1.25) -> 0; (1, 1.5, 1.25) -> 1;
    # (1, 0.5, 1.25) -> 2; (1, 0.5, 0.25, 0) -> 0
    assert picks == [0, 1, 0, 1, 2, 0]


def test_presence_penalty_counts_a_token_once() -> None:
    counts = TokenCounts()
    sampler = Sampler(SamplingParams(temperature=0, presence_penalty=1.0))
    picks = [row[0] for row in steps([sampler], LOGITS, 5, counts)]
    # (3, 2.5, 1.25, 0) -> 0; (2, 2.5, ..) -> 1; (2, 1.5, 1.25, 0) -> 0, and from then on
    # token 0 stays at 2 however often it repeats: presence is paid once
    assert picks == [0, 1, 0, 0, 0]


def test_penalised_and_plain_rows_share_a_step_greedy_and_sampled() -> None:
    counts = TokenCounts()
    plain = Sampler(SamplingParams(temperature=0))
    greedy = Sampler(SamplingParams(temperature=0, frequency_penalty=1.0))
    # top_k=1 takes the sampled path (temperature, filter, inverse CDF) deterministically
    sampled = Sampler(SamplingParams(temperature=0.7, top_k=1, frequency_penalty=1.0))
    rows = steps([plain, greedy, sampled], LOGITS, 6, counts)
    assert [r[0] for r in rows] == [0] * 6  # no penalty: never moves
    assert [r[1] for r in rows] == [0, 1, 0, 1, 2, 0]
    assert [r[2] for r in rows] == [0, 1, 0, 1, 2, 0]
    assert plain.count_row is None  # a sequence without penalties holds no counts
    assert counts.rows_in_use == 2


def test_sampled_rows_draw_from_the_penalised_distribution() -> None:
    """Two equally likely tokens; after token 0 is drawn, a presence penalty of 2 makes
    it e^2 times less likely than token 1 (draws: 2000, the bound is ~9 sigma)."""
    torch.manual_seed(7)
    counts = TokenCounts()
    samplers = [Sampler(SamplingParams(presence_penalty=2.0)) for _ in range(2000)]
    logits = torch.tensor([0.0, 0.0, -1e9])
    first = sample_rows(samplers, [torch.tensor([5.0, -1e9, -1e9])] * 2000, counts)
    assert set(first) == {0}
    second = sample_rows(samplers, [logits] * 2000, counts)
    want = 1 / (1 + math.e**2)  # token 0's probability after its penalty: 0.119
    assert abs(second.count(0) / 2000 - want) < 0.065


def test_rows_are_given_back_zeroed_and_grow_past_the_first_block() -> None:
    counts = TokenCounts()
    samplers = [Sampler(SamplingParams(temperature=0, frequency_penalty=2.0)) for _ in range(9)]
    steps(samplers, LOGITS, 2, counts)  # 9 rows: the tensor grew from 4 to 8 to 16
    assert counts.rows_in_use == 9
    assert len({s.count_row for s in samplers}) == 9
    for sampler in samplers:
        counts.release(sampler)
        assert sampler.count_row is None
    assert counts.rows_in_use == 0
    # a new sequence reuses a freed row and starts from zero counts
    fresh = Sampler(SamplingParams(temperature=0, frequency_penalty=1.0))
    assert [r[0] for r in steps([fresh], LOGITS, 2, counts)] == [0, 1]
    counts.release(fresh)
    counts.release(fresh)  # twice is harmless
    assert counts.rows_in_use == 0


def test_penalties_without_the_engines_counts_are_refused_not_ignored() -> None:
    sampler = Sampler(SamplingParams(temperature=0, presence_penalty=0.5))
    with pytest.raises(ValueError, match="TokenCounts"):
        sample_rows([sampler], [LOGITS])


@pytest.mark.parametrize("value", [math.nan, math.inf, -2.01, 2.5])
@pytest.mark.parametrize("field", ["presence_penalty", "frequency_penalty"])
def test_engine_parameters_refuse_out_of_range_penalties(field: str, value: float) -> None:
    makers: dict[str, Callable[[], SamplingParams]] = {
        "presence_penalty": lambda: SamplingParams(presence_penalty=value),
        "frequency_penalty": lambda: SamplingParams(frequency_penalty=value),
    }
    with pytest.raises(InvalidInput, match=field):
        makers[field]()


def test_wire_fields_become_engine_parameters() -> None:
    request = CompletionRequest.model_validate(
        {"model": "m", "prompt": "x", "presence_penalty": -2, "frequency_penalty": 1.5}
    )
    params = SamplingParams.from_fields(request, max_tokens=4)
    assert (params.presence_penalty, params.frequency_penalty) == (-2.0, 1.5)
    assert params.penalized
    unset = CompletionRequest.model_validate(
        {"model": "m", "prompt": "x", "presence_penalty": None}
    )
    plain = SamplingParams.from_fields(unset, max_tokens=4)
    assert (plain.presence_penalty, plain.frequency_penalty) == (0.0, 0.0)
    assert not plain.penalized
