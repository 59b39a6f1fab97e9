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


def test_a_temperature_below_the_greedy_epsilon_picks_the_likeliest_token() -> None:
    # 1e-38 passed validation; logits / 1e-38 overflowed to inf, softmax gave NaN and the
    # lookup pointed past the end: the last vocabulary id, every step.
    logits = torch.tensor([0.1, 2.0, 0.5, -1.0])
    for temperature in (1e-38, 1e-45, 1e-6):
        params = SamplingParams(temperature=temperature, seed=3)
        assert params.greedy
        assert Sampler(params).sample(logits) == 1
    assert not SamplingParams(temperature=1e-4).greedy


def test_a_top_p_that_rounds_to_zero_keeps_the_likeliest_token() -> None:
    # 1e-46 is 0 in float32: every token's preceding mass reached it, and all were dropped.
    for seed in range(20):
        sampler = Sampler(SamplingParams(temperature=1.0, top_p=1e-46, seed=seed))
        assert sampler.sample(LOGITS) == 0
    # the filter itself keeps exactly that token (not none, which only the sampler's
    # guard for rows without a distribution would save)
    row = torch.linspace(-3.0, 3.0, 3072)
    kept = Sampler(SamplingParams(top_p=1e-46))._filter(row)
    assert torch.isfinite(kept).nonzero().flatten().tolist() == [3071]


def test_a_row_without_a_finite_distribution_takes_its_likeliest_token() -> None:
    # An inf logit (or a NaN) makes the softmax NaN; the row takes its largest finite id
    # rather than the vocabulary's last.
    row = torch.tensor([0.0, float("inf"), 1.0, 0.5])
    assert Sampler(SamplingParams(temperature=1.0, seed=1)).sample(row) == 1
    nan_row = torch.tensor([0.0, float("nan"), 3.0, 0.5])
    assert Sampler(SamplingParams(temperature=0.7, seed=1)).sample(nan_row) == 2


def test_logit_bias_moves_the_tokens_it_names() -> None:
    greedy = SamplingParams(temperature=0)
    assert Sampler(greedy).sample(LOGITS) == 0
    banned = SamplingParams(temperature=0, logit_bias=((0, -100.0),))
    assert Sampler(banned).sample(LOGITS) == 1
    forced = SamplingParams(temperature=1.0, seed=7, logit_bias=((3, 100.0),))
    assert {Sampler(forced).sample(LOGITS) for _ in range(20)} == {3}
    assert LOGITS[0] == pytest.approx(torch.log(torch.tensor(0.5)))  # the row is not changed


def test_logit_bias_is_bounded_as_openai_bounds_it() -> None:
    from podserve.core.errors import InvalidInput

    with pytest.raises(InvalidInput, match="at most 300"):
        SamplingParams(logit_bias=tuple((i, 1.0) for i in range(301)))
    with pytest.raises(InvalidInput, match=r"\[-100, 100\]"):
        SamplingParams(logit_bias=((1, 100.5),))
    with pytest.raises(InvalidInput, match=r"\[-100, 100\]"):
        SamplingParams(logit_bias=((-1, 1.0),))
