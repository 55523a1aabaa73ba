"""Sampling that does not depend on the batch: each prompt draws from its own seeded RNG.

HF generate samples a whole batch with one `torch.multinomial` on one RNG, so a prompt's tokens depend on
which prompts share its call; with env pools of different sizes, or overlapped rollouts whose calls form
as envs answer, the same seed would then sample other tokens. `SeededSampling` is the Gumbel-max trick
instead: with g_v = -log(-log U_v), U_v uniform on (0, 1), argmax_v(s_v + g_v) is distributed as
softmax(s); HF generate then runs greedy, and this processor, last in the chain, turns the processed
scores (temperature, top-k, top-p, min-p applied as HF's sampling would: `sampling_warpers`) into an
exact sample. Row r's noise at its t-th token is the t-th draw of a generator seeded with seeds[r], so a
row's tokens depend on its prompt, its seed and the model only (up to the floating-point effects of batch
size and padding on the scores, as for greedy decoding).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from transformers import LogitsProcessor

#: the sampling settings of a GenerationConfig that `sampling_warpers` turns into processors
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff")


class SeededSampling(LogitsProcessor):
    """Adds per-row Gumbel noise from per-row generators (one seed per row of the batch), drawn on the scores'
    device in float32.

    float32 is exact enough: its uniforms are multiples of 2**-24, so the noise is cut at about -2.8 and 16.6
    (a Gumbel variable lies outside with probability about 1e-7), and a token's chance to be drawn moves by
    less than that; HF generate's scores are float32 whatever the model's dtype, so the sum is exact as
    before. The draws follow the seed on each kind of device (a CPU run reproduces a CPU run, a GPU run a GPU
    run; CUDA's generator draws other numbers than the CPU's for the same seed)."""

    def __init__(self, seeds: Sequence[int]) -> None:
        self.seeds = [int(seed) for seed in seeds]
        self.generators: list[torch.Generator] | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if scores.shape[0] != len(self.seeds):
            raise ValueError(f"{scores.shape[0]} rows of scores for {len(self.seeds)} seeds")
        device = scores.device
        if self.generators is None:  # on the first token, where the scores live
            self.generators = [torch.Generator(device=device).manual_seed(seed) for seed in self.seeds]
        width = scores.shape[-1]
        uniform = torch.stack([torch.rand(width, generator=g, device=device, dtype=torch.float32)
                               for g in self.generators])
        tiny = torch.finfo(torch.float32).tiny
        gumbel = uniform.clamp_(tiny, 1.0 - 2.0 ** -24).log_().neg_().log_().neg_()
        return scores + gumbel.to(dtype=scores.dtype)


class SamplerLogps(LogitsProcessor):
    """Records, for each row, the log-probability of every token it draws under the distribution it is
    drawn from: the scores as they reach this processor (after the sampling warpers: temperature, top-k,
    top-p; before `SeededSampling`'s noise), in float32. A token is known only at the next call (it is then
    the last of `input_ids`), so each call stores the current log-softmax and reads the previous one; the
    last token is read by `finish`. One batch x vocabulary row is held at a time."""

    def __init__(self) -> None:
        self.previous: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.previous is not None:
            self.steps.append(self.previous.gather(1, input_ids[:, -1:].to(self.previous.device)).squeeze(1))
        self.previous = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """The (batch, generated tokens) log-probs, given the tokens of the last generation step."""
        if self.previous is not None:
            self.steps.append(self.previous.gather(1, last_tokens.view(-1, 1).to(self.previous.device)).squeeze(1))
            self.previous = None
        return torch.stack(self.steps, dim=1) if self.steps else torch.zeros((len(last_tokens), 0))


def sampling_warpers(config: Any) -> list[LogitsProcessor]:
    """The processors HF generate's sampling would apply for this GenerationConfig, in HF's order."""
    from transformers.generation.logits_process import (EpsilonLogitsWarper, EtaLogitsWarper, MinPLogitsWarper,
                                                        TemperatureLogitsWarper, TopKLogitsWarper,
                                                        TopPLogitsWarper, TypicalLogitsWarper)

    warpers: list[LogitsProcessor] = []
    if config.temperature is not None and config.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(config.temperature))
    if config.top_k is not None and config.top_k != 0:
        warpers.append(TopKLogitsWarper(top_k=config.top_k, min_tokens_to_keep=1))
    if config.top_p is not None and config.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=config.top_p, min_tokens_to_keep=1))
    if config.min_p is not None:
        warpers.append(MinPLogitsWarper(min_p=config.min_p, min_tokens_to_keep=1))
    if getattr(config, "typical_p", None) is not None and config.typical_p < 1.0:
        warpers.append(TypicalLogitsWarper(mass=config.typical_p, min_tokens_to_keep=1))
    if getattr(config, "epsilon_cutoff", None) is not None and 0.0 < config.epsilon_cutoff < 1.0:
        warpers.append(EpsilonLogitsWarper(epsilon=config.epsilon_cutoff, min_tokens_to_keep=1))
    if getattr(config, "eta_cutoff", None) is not None and 0.0 < config.eta_cutoff < 1.0:
        warpers.append(EtaLogitsWarper(epsilon=config.eta_cutoff, min_tokens_to_keep=1))
    return warpers
