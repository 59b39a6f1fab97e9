"""Sampling, in one module: the engine's parameters (and their one conversion from the
requests' wire fields), the sampler over one logits row, and log-probabilities.

A request with a `seed` draws from its own `torch.Generator`, so what it samples depends
only on its own logits and seed, never on which requests shared its step. Presence and
frequency penalties (`penalties.py`) are applied to the raw logits first, for greedy and
sampled rows alike.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from podserve.core.errors import InvalidInput
from podserve.generation.penalties import TokenCounts
from podserve.protocol.sampling import (
    LOGIT_BIAS_MAX,
    MAX_LOGIT_BIASES,
    PENALTY_MAX,
    PENALTY_MIN,
    SamplingFields,
)

if TYPE_CHECKING:
    import torch


MAX_LOGPROBS = 20  # alternatives per token, as OpenAI's top_logprobs and vLLM's default
# Below this temperature a request is greedy, as vLLM decides (vllm/sampling_params.py,
# `_SAMPLING_EPS = 1e-5`): dividing float32 logits by 1e-38 overflows them to inf, whose
# softmax is NaN, and the sampler then picked the last vocabulary id every step.
GREEDY_BELOW = 1e-5
# max_tokens for "until EOS or the context is full" (OpenAI's chat default): no context
# is this long, and with `fit_context` admission lowers it to what the context leaves.
UNTIL_CONTEXT_FULL = 2**31 - 1


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """The model's log-probability of the chosen token and of the `k` most likely tokens
    at that position (from the raw logits: before temperature, top-k and top-p)."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def token_logprobs(row: torch.Tensor, token: int, k: int) -> TokenLogprob:
    import torch

    logprobs = torch.log_softmax(row.float(), dim=-1)
    top: tuple[tuple[int, float], ...] = ()
    if k:
        values, ids = torch.topk(logprobs, k)
        top = tuple(zip(ids.tolist(), values.tolist(), strict=True))
    return TokenLogprob(float(logprobs[token]), top)


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 means no top-k filter
    seed: int | None = None
    max_tokens: int = 16
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    # None: no log-probabilities; k >= 0: each token's, and the k most likely alternatives
    logprobs: int | None = None
    # OpenAI's penalties over the tokens generated so far (penalties.py); 0 is off
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    # OpenAI's logit_bias: (token id, bias) added to the logits before sampling
    logit_bias: tuple[tuple[int, float], ...] = ()
    # The request named no max_tokens: `max_tokens` is only an upper bound, which
    # admission lowers to what the model's context leaves after the prompt
    # (generation/worker.py), rather than refusing a default the client never sent.
    fit_context: bool = False

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise InvalidInput(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise InvalidInput(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise InvalidInput(f"top_k must be >= 0, got {self.top_k}")
        if self.max_tokens < 1:
            raise InvalidInput(f"max_tokens must be >= 1, got {self.max_tokens}")
        if any(not s for s in self.stop):
            raise InvalidInput("stop strings must not be empty")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise InvalidInput(f"logprobs must be in [0, {MAX_LOGPROBS}], got {self.logprobs}")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not (math.isfinite(value) and PENALTY_MIN <= value <= PENALTY_MAX):
                raise InvalidInput(
                    f"{name} must be in [{PENALTY_MIN}, {PENALTY_MAX}], got {value!r}"
                )
        if len(self.logit_bias) > MAX_LOGIT_BIASES:
            raise InvalidInput(
                f"logit_bias has {len(self.logit_bias)} tokens; at most {MAX_LOGIT_BIASES}"
            )
        for token, bias in self.logit_bias:
            if token < 0 or not (math.isfinite(bias) and abs(bias) <= LOGIT_BIAS_MAX):
                raise InvalidInput(
                    f"logit_bias must map token ids >= 0 to biases in [-{LOGIT_BIAS_MAX:g}, "
                    f"{LOGIT_BIAS_MAX:g}], got {token}: {bias!r}"
                )

    @classmethod
    def from_fields(
        cls,
        fields: SamplingFields,
        *,
        max_tokens: int,
        logprobs: int | None = None,
        logit_bias: tuple[tuple[int, float], ...] = (),
        fit_context: bool = False,
    ) -> SamplingParams:
        """The sampling fields of a request (OpenAI's or Triton's generate schema, one
        wire schema in `protocol/sampling.py`) as the engine's parameters."""
        return cls(
            temperature=fields.temperature,
            top_p=fields.top_p,
            top_k=fields.top_k,
            seed=fields.seed,
            max_tokens=max_tokens,
            stop=fields.stop_strings(),
            ignore_eos=fields.ignore_eos,
            logprobs=logprobs,
            presence_penalty=fields.presence_penalty or 0.0,
            frequency_penalty=fields.frequency_penalty or 0.0,
            logit_bias=logit_bias,
            fit_context=fit_context,
        )

    def fitted(self, prompt_tokens: int, context: int, cap: int | None = None) -> SamplingParams:
        """With `fit_context` (the request named no max_tokens): `max_tokens` lowered to
        what the context leaves after the prompt, and to the engine's `cap`, as vLLM's
        default (context minus prompt); a default never refuses a prompt that fits. The
        flag stays, so each layer that knows a limit may lower it further."""
        if not self.fit_context:
            return self
        left = context - prompt_tokens
        if left < 1:
            raise InvalidInput(
                f"prompt ({prompt_tokens} tokens) fills the model's context of {context} "
                "tokens: no room to generate"
            )
        limit = min(self.max_tokens, left, left if cap is None else cap)
        return dataclasses.replace(self, max_tokens=limit)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    @property
    def penalized(self) -> bool:
        return self.presence_penalty != 0 or self.frequency_penalty != 0


class Sampler:
    """Picks the next token of one request from its logits row (shape `[vocab]`)."""

    __slots__ = ("_generator", "count_row", "params")

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        # this sequence's row in the engine's `TokenCounts` while it is penalised
        self.count_row: int | None = None
        self._generator: torch.Generator | None = None
        if params.seed is not None and not params.greedy:
            import torch

            self._generator = torch.Generator().manual_seed(params.seed)

    @property
    def presence_penalty(self) -> float:
        return self.params.presence_penalty

    @property
    def frequency_penalty(self) -> float:
        return self.params.frequency_penalty

    def sample(self, logits: torch.Tensor, counts: TokenCounts | None = None) -> int:
        return sample_rows([self], [logits], counts)[0]

    def _filter(self, scores: torch.Tensor) -> torch.Tensor:
        """Apply top-k and top-p to one row of temperature-scaled scores."""
        import torch

        params = self.params
        if params.top_k and params.top_k < scores.shape[-1]:
            kth = torch.topk(scores, params.top_k).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if params.top_p < 1.0:
            sorted_scores, order = torch.sort(scores, descending=True)
            # float64: a float32 top_p of 1e-46 is 0, which every mass reaches
            probs = torch.softmax(sorted_scores.double(), dim=-1)
            # drop a token once the tokens ranked above it already reach top_p
            drop = probs.cumsum(dim=-1) - probs >= params.top_p
            drop[0] = False  # the likeliest token always stays, whatever the rounding
            scores = scores.scatter(0, order[drop], float("-inf"))
        return scores


def sample_rows(
    samplers: Sequence[Sampler],
    rows: Sequence[torch.Tensor],
    counts: TokenCounts | None = None,
) -> list[int]:
    """The next token of each request, from its sampler and logits row.

    Rows whose sampler has penalties are penalised first, all in one pass, by the counts
    of the tokens sampled before (`counts`: the engine's, kept across steps; required when
    a sampler has penalties), and the tokens sampled now are counted.

    One batched pass for a whole step: greedy rows take one argmax; sampled rows one
    softmax and one inverse-CDF lookup with ONE uniform draw each (from the request's own
    generator when it has a seed). `torch.multinomial` draws a random number per
    vocabulary entry instead, and on the step thread that was 14% of a decode step at 16
    streams. Per row the draw is exact sampling from the filtered distribution, and a
    seeded request's tokens still depend only on its own logits and seed.
    """
    import torch

    if not rows:
        return []
    logits = torch.stack(list(rows)).float()
    penalised = [i for i, s in enumerate(samplers) if s.params.penalized]
    if penalised:
        if counts is None:
            raise ValueError("sampling with penalties needs the engine's TokenCounts")
        counts.penalize(logits, penalised, [samplers[i] for i in penalised])
    for i, sampler in enumerate(samplers):
        if sampler.params.logit_bias:
            _add_bias(logits[i], sampler.params.logit_bias)
    tokens = _pick(samplers, logits)
    if penalised and counts is not None:
        counts.record([samplers[i] for i in penalised], [tokens[i] for i in penalised])
    return tokens


def _pick(samplers: Sequence[Sampler], logits: torch.Tensor) -> list[int]:
    """Greedy and sampled rows of the step's (penalised) `[batch, vocab]` logits."""
    import torch

    tokens = [0] * len(samplers)
    greedy = [i for i, s in enumerate(samplers) if s.params.greedy]
    if greedy:
        for i, token in zip(greedy, logits[greedy].argmax(dim=-1).tolist(), strict=True):
            tokens[i] = int(token)
    sampled = [i for i, s in enumerate(samplers) if not s.params.greedy]
    if not sampled:
        return tokens
    temperatures = torch.tensor([samplers[i].params.temperature for i in sampled])
    scores = logits[sampled] / temperatures.unsqueeze(1)
    for j, i in enumerate(sampled):
        params = samplers[i].params
        if params.top_p < 1.0 or (params.top_k and params.top_k < scores.shape[-1]):
            scores[j] = samplers[i]._filter(scores[j])
    probs = torch.softmax(scores, dim=-1).double()
    # A row with no finite distribution (inf or NaN logits from the model) would point
    # the lookup past its end, at the last vocabulary id: it takes its likeliest token.
    broken = ~torch.isfinite(probs).all(dim=-1)
    if bool(broken.any()):
        probs[broken] = 0.0
        best = logits[sampled][broken].nan_to_num(nan=float("-inf")).argmax(dim=-1)
        probs[broken] = probs[broken].scatter(1, best.unsqueeze(1), 1.0)
    cdf = probs.cumsum(dim=-1)
    uniform = torch.rand(len(sampled), dtype=torch.float64)
    for j, i in enumerate(sampled):
        generator = samplers[i]._generator
        if generator is not None:
            uniform[j] = torch.rand((), generator=generator, dtype=torch.float64)
    # scaled by each row's total so rounding never points past the last token; `right`
    # skips the tokens of probability 0, whose CDF equals their predecessor's
    targets = (uniform * cdf[:, -1]).unsqueeze(1)
    picked = torch.searchsorted(cdf, targets, right=True).squeeze(1)
    picked = picked.clamp_(max=scores.shape[-1] - 1)
    for i, token in zip(sampled, picked.tolist(), strict=True):
        tokens[i] = int(token)
    return tokens


def _add_bias(row: torch.Tensor, bias: tuple[tuple[int, float], ...]) -> None:
    """OpenAI's logit_bias, in place: each listed token's logit moves by its bias (-100
    all but bans a token, 100 all but forces it)."""
    import torch

    ids = torch.tensor([token for token, _ in bias], dtype=torch.long)
    row.index_add_(0, ids, torch.tensor([value for _, value in bias], dtype=row.dtype))


def choice_params(params: SamplingParams, n: int) -> tuple[SamplingParams, ...]:
    """One sequence per choice (the HTTP routes' and the queue consumer's). With a seed,
    choice i samples with seed + i, modulo 2**64, so the choices differ and the answer is
    reproducible. torch's manual_seed takes [-2**63, 2**64 - 1] and maps a negative seed s
    to s + 2**64, so this is the same generator as seed + i wherever that was in range,
    and never past the top: a seed of 2**64 - 1 with n=2 was a 500."""
    if n == 1:
        return (params,)
    return tuple(
        dataclasses.replace(params, seed=None if params.seed is None else (params.seed + i) % 2**64)
        for i in range(n)
    )
