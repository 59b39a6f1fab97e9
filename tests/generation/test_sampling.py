"""The batched sampler: the frequencies it draws, the filters, greedy rows, seeds.

Draws use a fixed global torch seed, and the tolerances are many standard deviations
wide, so these tests are deterministic and still fail on a biased sampler."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from podserve.generation.sampling import Sampler, SamplingParams, sample_rows  # noqa: E402

PROBS = [0.5, 0.3, 0.15, 0.05, 0.0]
LOGITS = torch.log(torch.tensor(PROBS))  # the last token has probability 0 (-inf)


def frequencies(params: SamplingParams, draws: int = 8000) -> list[float]:
    torch.manual_seed(1234)
    samplers = [Sampler(params) for _ in range(draws)]
    tokens = sample_rows(samplers, [LOGITS] * draws)
    return [tokens.count(t) / draws for t in range(len(PROBS))]


def test_draws_follow_the_distribution_and_never_pick_a_zero_probability_token() -> None:
    seen = frequencies(SamplingParams(temperature=1.0))
    for got, want in zip(seen, PROBS, strict=True):
        assert abs(got - want) < 0.025, (seen, PROBS)
    assert seen[-1] == 0.0


def test_temperature_sharpens_and_flattens() -> None:
    cold = frequencies(SamplingParams(temperature=0.25))
    hot = frequencies(SamplingParams(temperature=4.0))
    assert cold[0] > 0.85  # 0.5^4 / (0.5^4 + 0.3^4 + ...) = 0.88
    assert hot[3] > 0.12  # flatter: the 5% token rises towards a quarter


def test_top_k_and_top_p_remove_the_tail() -> None:
    top2 = frequencies(SamplingParams(top_k=2))
    assert top2[2] == top2[3] == 0.0
    assert abs(top2[0] - 0.625) < 0.03  # 0.5 / (0.5 + 0.3)
    nucleus = frequencies(SamplingParams(top_p=0.7))  # keeps 0.5 and 0.3 (0.5 < 0.7)
    assert nucleus[2] == nucleus[3] == 0.0
    assert nucleus[1] > 0.3


def test_greedy_and_sampled_rows_share_a_batch() -> None:
    greedy = Sampler(SamplingParams(temperature=0))
    top1 = Sampler(SamplingParams(top_k=1))
    rows = [LOGITS, torch.flip(LOGITS, [0]), LOGITS]
    assert sample_rows([greedy, greedy, top1], rows) == [0, 4, 0]
    assert sample_rows([], []) == []


def test_a_seeded_request_draws_the_same_tokens_whatever_its_batch_mates() -> None:
    params = SamplingParams(seed=42)

    def draws(mates: int) -> list[int]:
        mine = Sampler(params)
        out = []
        for _ in range(30):
            others = [Sampler(SamplingParams(seed=k)) for k in range(mates)]
            out.append(sample_rows([*others, mine], [LOGITS] * (mates + 1))[-1])
        return out

    alone = draws(0)
    assert alone == draws(5) == draws(11)
    assert len(set(alone)) > 1  # it does sample


def test_a_single_row_sample_matches_the_batched_path() -> None:
    first, second = Sampler(SamplingParams(seed=3)), Sampler(SamplingParams(seed=3))
    singles = [first.sample(LOGITS) for _ in range(20)]
    assert singles == [sample_rows([second], [LOGITS])[0] for _ in range(20)]
