"""Every use of TRL's private API, in one place, for the one TRL version this project is tested with.

SkillRise's trainer is a `trl.GRPOTrainer` whose batches come from env rollouts instead of a prompt dataset.
That needs four of GRPOTrainer's private methods and a few of its private attributes; they change between
TRL releases (TRL 1.10 had no `selective_log_softmax_and_entropy` and another `_generate_single_turn`
signature), so nothing outside this module touches them, `TRL_VERSIONS` is the range pyproject pins, and
tests/test_trl_contract.py checks every signature and returned key below, failing loudly on an upgrade.

The contract (what `GRPOAdapter` relies on and what it offers its subclass):

- `_generate_and_score_completions(inputs)` (TRL calls it once per generation batch; overridden): returns
  the subclass's `rollout_batch()`, a dict with the keys of `BATCH_KEYS`, one row per model call.
- `_get_per_token_logps_and_entropies(model, ids, mask, logits_to_keep, ...)` (overridden): scores only the
  last `logits_to_keep + 1` positions (TRL's fused head scores every position when Triton is missing, as on
  CPU; on agent turns, long prompts with short completions, that is mostly waste; the numbers are identical).
- `_compute_loss(model, inputs)` (TRL's clipped policy loss; wrapped): run on padding-trimmed micro-batches.
- `_generate_single_turn(prompt_ids, images, multimodal_fields, num_generations)` (called): TRL's generation
  (HF generate on CPU, vLLM on GPUs), exposed as `generate_ids`.
- vLLM colocate (`vllm_engine_admits`, `_vllm_seeded`): the module attribute
  `trl.trainer.grpo_trainer.VLLMGeneration` (subclassed while the trainer is built, to size the engine),
  the `vllm_generation.llm` engine whose `generate(prompts, sampling_params=...)` TRL calls once per
  generation, and vLLM's `SamplingParams.clone()` and `.seed`.
- private attributes read: `_dist` (its `summon_full_params`, FSDP's full-parameter context for generation), `_metrics` (`log_metric`), `chat_template_kwargs` (`template_kwargs`),
  `_tokenizer` (`pad_token_id`), `entropy_coef`, `loss_type`, `temperature`; for seeded generation
  (`generate_ids(..., seeds)`, HF generate's path): `use_vllm`, `use_transformers_continuous_batching`,
  `generation_config`, `generation_kwargs`, `eos_token_ids`.
"""

from __future__ import annotations

import copy
import os
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import torch
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import pad, selective_log_softmax, selective_log_softmax_and_entropy

from skillrise_gym.prefix_cache import PrefixCache, prefilled, supports
from skillrise_train.attention import update_attention
from skillrise_train.lora import merged_lora

#: the TRL releases this module is written and tested against (pyproject pins the same range)
TRL_VERSIONS = (">=1.16", "<1.17")
#: the keys of a batch handed to TRL's loss (what `_generate_and_score_completions` returns)
BATCH_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "num_items_in_batch")
#: per-row tensors that TRL aligns with the completion columns (trimmed with them)
COMPLETION_ALIGNED = ("old_per_token_logps", "sampling_per_token_logps", "importance_sampling_ratio",
                      "ref_per_token_logps", "tool_mask")
#: loss aggregations whose value is already normalised by the whole batch's token count
BATCH_TOKEN_NORMALISED = ("dapo", "cispo", "vespo")

__all__ = ["BATCH_KEYS", "GRPOAdapter", "GRPOConfig", "TRL_VERSIONS", "check_trl_version", "pad", "sampler_copy",
           "trim_padding"]


def sampler_copy(model: Any, dtype: torch.dtype) -> Any:
    """A frozen copy of `model` (its LoRA adapters merged, as inside `generation_weights`) in `dtype`, for
    generation only (on CPUs with bfloat16 matrix units it generates faster: docs/train.md, "CPU generation
    and update", has the figures); the update still scores in the policy's own dtype, with the copy's
    log-probs as the old policy's (the trainer's "Batching")."""
    copy_ = copy.deepcopy(model)
    for module in copy_.modules():
        # accelerate wraps a prepared model's forward in an instance attribute (autocast, outputs to float32)
        # whose closure holds the ORIGINAL model's forward: a deep copy keeps calling the float32 policy.
        # The copy generates with its class's own forward.
        module.__dict__.pop("forward", None)
        module.__dict__.pop("_original_forward", None)
    for parameter in copy_.parameters():
        parameter.requires_grad_(False)
    return copy_.to(dtype).eval()


def check_trl_version() -> str:
    """The installed TRL version; a clear error when it is outside `TRL_VERSIONS`."""
    import trl
    from packaging.version import Version

    version = Version(trl.__version__)
    low, high = (Version(bound.lstrip("<>=")) for bound in TRL_VERSIONS)
    if not low <= version < high:
        raise RuntimeError(
            f"skillrise-train is tested with trl {TRL_VERSIONS[0]},{TRL_VERSIONS[1]} and relies on its private API "
            f"(skillrise_train/trl_adapter.py); trl {trl.__version__} is installed. Install the tested one: "
            f"pip install 'skillrise-gym[train]'"
        )
    return trl.__version__


def trim_padding(inputs: dict[str, Any]) -> dict[str, Any]:
    """Drop prompt columns that are padding in every row of this micro-batch, and completion columns past
    the longest completion: a micro-batch of short rows then costs what its rows cost, not the step's
    longest row."""
    prompt_mask, completion_mask = inputs["prompt_mask"], inputs["completion_mask"]
    used = prompt_mask.any(dim=0).nonzero()
    first = int(used[0]) if len(used) else prompt_mask.size(1) - 1
    used = completion_mask.any(dim=0).nonzero()
    last = int(used[-1]) + 1 if len(used) else 1
    if first == 0 and last == completion_mask.size(1):
        return inputs
    out = dict(inputs)
    out["prompt_ids"], out["prompt_mask"] = inputs["prompt_ids"][:, first:], prompt_mask[:, first:]
    out["completion_ids"], out["completion_mask"] = inputs["completion_ids"][:, :last], completion_mask[:, :last]
    for key in COMPLETION_ALIGNED:
        if isinstance(inputs.get(key), torch.Tensor) and inputs[key].dim() == 2 and inputs[key].size(1) > 1:
            out[key] = inputs[key][:, :last]
    if inputs["advantages"].dim() == 2:
        out["advantages"] = inputs["advantages"][:, :last]
    return out


@contextmanager
def vllm_engine_admits(max_num_seqs: int) -> Iterator[None]:
    """Inside the block (around GRPOTrainer.__init__), TRL's colocated vLLM engine is built to decode at least
    `max_num_seqs` sequences at once. TRL sizes it per_device_train_batch_size x TP x steps_per_generation
    (trl/trainer/grpo_trainer.py, where it builds `VLLMGeneration`), a prompt-dataset batch; a rollout
    sends up to `generation_batch` prompts per call, and the trainer's per_device_train_batch_size is a
    placeholder of 2, so TRL's size would decode about two sequences at a time."""
    import trl.trainer.grpo_trainer as grpo

    original = grpo.VLLMGeneration

    class Sized(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["max_num_seqs"] = max(int(kwargs.get("max_num_seqs") or 0), int(max_num_seqs))
            super().__init__(*args, **kwargs)

    grpo.VLLMGeneration = Sized
    try:
        yield
    finally:
        grpo.VLLMGeneration = original


class GRPOAdapter(GRPOTrainer):
    """GRPOTrainer with its private hooks turned into the few public ones a rollout trainer needs.

    Subclasses implement `rollout_batch()` (one batch of rows, `BATCH_KEYS`) and call `generate_ids`,
    `policy_logps`, `policy_loss`, `log_metric`; they never touch TRL's private names themselves.
    """

    #: generation folds LoRA adapters into the base weights (`generation_weights`, skillrise_train/lora.py)
    merge_lora_for_generation: bool = True
    #: a dtype to generate in (a copy of the policy's weights, `generation_weights`); None: the policy itself
    generation_dtype: torch.dtype | None = None
    #: the reduced-precision copy that generates inside a `generation_weights` block (None outside)
    _sampler: Any = None
    #: bytes of prompt keys/values a `generation_weights` block keeps for later prompts sharing their prefix
    #: (skillrise_gym/prefix_cache.py; HF generate's seeded path); 0: prefill every prompt in full
    prefix_cache_bytes: int = 0
    #: the block's prefix cache (None outside a block, or when off)
    _prefix_cache: Any = None
    #: the last block's prefill counts (`prefix_cache.PrefillStats`; None before any block with the cache on)
    last_prefill: Any = None
    #: (plan, row indices) while the update scores a micro-batch of `shared_prefix.PrefixPlan` (compute_loss)
    _shared_rows: Any = None

    # ------------------------------------------------------------------ what subclasses implement
    def rollout_batch(self) -> dict[str, Any]:
        raise NotImplementedError

    # ------------------------------------------------------------------ TRL's private hooks
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        return self.rollout_batch()

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False,
        compute_aux_loss=False, **multimodal,
    ):
        if compute_aux_loss or any(v is not None for v in multimodal.values()):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **multimodal,
            )
        batch_size = batch_size or input_ids.size(0)
        shared = self._shared_rows
        if shared is not None and input_ids.size(0) != len(shared[1]):
            raise RuntimeError(f"the shared-prefix plan's micro-batch has {len(shared[1])} rows, the loss "
                               f"scored {input_ids.size(0)}")
        if shared is not None:  # rows under one shared prompt prefix, run on its keys and values, in one pass
            batch_size = input_ids.size(0)
        all_logps, all_entropies = [], []
        with update_attention(self.accelerator.unwrap_model(model)):
            for start in range(0, input_ids.size(0), batch_size):
                ids = input_ids[start : start + batch_size]
                mask = attention_mask[start : start + batch_size]
                if shared is not None:
                    plan, rows = shared
                    logits = plan.row_logits(model, rows, ids, mask, logits_to_keep, self.accelerator.autocast)
                else:
                    if bool(mask.all()):
                        # no padding: without a mask, SDPA takes its causal (flash) kernel, which skips the
                        # hidden triangle (with a mask, attention.py's masked_sdpa skips what it can)
                        mask = None
                    with self.accelerator.autocast():
                        # the logits at position t predict token t+1: keep_k + 1 positions cover the k
                        # completion tokens
                        logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=logits_to_keep + 1,
                                       use_cache=False).logits
                logits = logits[:, :-1, :].float()
                targets = ids[:, -logits_to_keep:]
                if compute_entropy:  # the entropy bonus needs its gradient
                    logps, entropy = selective_log_softmax_and_entropy(logits, targets,
                                                                       temperature=self.temperature)
                    all_entropies.append(entropy)
                else:
                    logps = selective_log_softmax(logits / self.temperature, targets)
                all_logps.append(logps)
        logps = torch.cat(all_logps, dim=0)
        entropies = torch.cat(all_entropies, dim=0) if compute_entropy else None
        return logps, entropies, None

    def _compute_loss(self, model, inputs):
        return super()._compute_loss(model, trim_padding(inputs))

    # ------------------------------------------------------------------ what subclasses call
    def generate_ids(self, prompt_ids: list[list[int]], seeds: Sequence[int] | None = None, *,
                     with_logps: bool = False) -> Any:
        """One completion per prompt through TRL's generation path (HF generate, or vLLM). With `seeds` (one
        per prompt) each prompt samples from its own seeded RNG, so its tokens do not depend on its
        batch-mates: on HF generate's path by `_generate_seeded`, on vLLM's by a request of its own seed
        (`_vllm_seeded`).

        With `with_logps`, returns (completions, log-probs): where a `generation_dtype` copy sampled them
        (HF generate's path, sampling), each completion token's log-prob under the distribution it was drawn
        from, else None (the policy itself sampled: its own log-probs are the old ones)."""
        if seeds is not None and len(seeds) != len(prompt_ids):
            raise ValueError(f"{len(seeds)} seeds for {len(prompt_ids)} prompts")
        if not (self.use_vllm or self.use_transformers_continuous_batching) and (
                seeds is not None or self.generation_dtype is not None):
            completions, logps = self._generate_seeded(prompt_ids, seeds)
            return (completions, logps) if with_logps else completions
        with self._vllm_seeded(seeds):
            completion_ids, _logprobs = self._generate_single_turn(prompt_ids, None, {}, num_generations=1)
        completions = [list(c) for c in completion_ids]
        return (completions, None) if with_logps else completions

    @contextmanager
    def _vllm_seeded(self, seeds: Sequence[int] | None) -> Iterator[None]:
        """Inside the block, TRL's colocated vLLM engine samples request i with `seeds[i]`: TRL builds one
        `SamplingParams` for the whole call (trl/generation/vllm_generation.py, `generate`); its call to
        `llm.generate` is given one copy per request, each with its own seed (vLLM seeds each request's
        sampler apart). Nothing else of TRL's path changes (weight sync, sleep mode)."""
        engine = getattr(getattr(self, "vllm_generation", None), "llm", None) if self.use_vllm else None
        if seeds is None or engine is None:
            yield
            return
        original = engine.generate

        def generate(prompts: Any, sampling_params: Any = None, **kwargs: Any) -> Any:
            if len(prompts) != len(seeds):  # TP > 1 gathers other ranks' prompts: refused (vllm_settings)
                raise RuntimeError(f"vLLM was given {len(prompts)} prompts for {len(seeds)} seeds")
            per_request = []
            for seed in seeds:
                params = sampling_params.clone()
                params.seed = int(seed)
                per_request.append(params)
            return original(prompts, sampling_params=per_request, **kwargs)

        engine.generate = generate  # an instance attribute shadows the method for this call only
        try:
            yield
        finally:
            del engine.generate

    @torch.no_grad()
    def _generate_seeded(self, prompt_ids: list[list[int]],
                         seeds: Sequence[int] | None) -> tuple[list[list[int]], list[list[float]] | None]:
        """TRL's HF-generate path (left-padded prompts, its GenerationConfig, the unwrapped model, completions
        cut after the first EOS), sampling with `sampling.SeededSampling`: HF generate runs greedy on scores
        processed as its sampling would, plus per-row Gumbel noise: exact samples, one RNG per prompt
        (without seeds, one drawn from torch's RNG per prompt). Generates with the `generation_dtype` copy
        when there is one, and then also returns each sampled token's log-prob under the distribution it was
        drawn from (`sampling.SamplerLogps`); else None."""
        from transformers import LogitsProcessorList
        from trl.models import unwrap_model_for_generation

        from skillrise_train.sampling import SAMPLING_FIELDS, SamplerLogps, SeededSampling, sampling_warpers

        if seeds is None:
            seeds = [int(s) for s in torch.randint(0, 2**31 - 1, (len(prompt_ids),))]

        device = self.accelerator.device
        rows = [torch.tensor(ids, dtype=torch.long, device=device) for ids in prompt_ids]
        input_ids = pad(rows, padding_value=self.pad_token_id, padding_side="left")
        attention_mask = pad([torch.ones_like(r) for r in rows], padding_value=0, padding_side="left")
        config = copy.deepcopy(self.generation_config)
        recorder = SamplerLogps() if config.do_sample and self.generation_dtype is not None else None
        # greedy asked for (do_sample False): nothing to seed; the recorder sees the distribution drawn from
        processors = LogitsProcessorList([*sampling_warpers(config), *([recorder] if recorder else []),
                                          SeededSampling(seeds)] if config.do_sample else [])
        for name in SAMPLING_FIELDS:
            if hasattr(config, name):
                setattr(config, name, None)
        config.do_sample = False
        with unwrap_model_for_generation(
            self.model_wrapped, self.accelerator, gather_deepspeed3_params=self.args.ds3_gather_for_generation,
            generation_kwargs=self.generation_kwargs,
            gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
        ) as model, self._dist.summon_full_params(self.model_wrapped, recurse=False):  # FSDP: as TRL's generate
            with self.generation_weights():  # LoRA folded in for the call (a no-op inside a rollout's own)
                sampler = self._sampler if self._sampler is not None else model
                store = self._prefix_cache
                cache = {"cache": prefilled(sampler, prompt_ids, store)} if store is not None else {}
                out = sampler.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config,
                                       logits_processor=processors, **cache)
        completions = out[:, input_ids.shape[1]:].cpu().tolist()
        logps = recorder.finish(out[:, -1]).cpu().tolist() if recorder is not None else None
        eos = set(self.eos_token_ids)
        cut, cut_logps = [], []
        for n, row in enumerate(completions):
            end = next((i for i, token in enumerate(row) if token in eos), None)
            length = len(row) if end is None else end + 1
            cut.append(row[:length])
            if logps is not None:
                cut_logps.append(logps[n][:length])
        return cut, (cut_logps if logps is not None else None)

    def policy_logps(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     logits_to_keep: int) -> torch.Tensor:
        """Log-probs of the last `logits_to_keep` tokens of each row under `model` (temperature-scaled)."""
        logps, _, _ = self._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep)
        return logps

    def policy_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        """TRL's clipped policy loss (its `loss_type`, `epsilon`, `delta`, entropy bonus) on one micro-batch."""
        return self._compute_loss(model, inputs)

    def log_metric(self, name: str, value: float) -> None:
        """A value for TRL's per-step log (averaged over the step's calls, as TRL's own metrics)."""
        self._metrics["train"][name].append(value)

    @contextmanager
    def generation_weights(self) -> Iterator[None]:
        """A context for a block of generation calls (a rollout, an evaluation): LoRA adapters merged into the
        base weights once for the block, restored exactly on exit (lora.py); the calls' own merges are then
        no-ops. Nothing is merged for sharded models or with `merge_lora_for_generation` off. With a
        `generation_dtype`, a copy of the (merged) policy in that dtype generates inside the block (made
        once per block: the weights do not change in it; freed on exit)."""
        with merged_lora(self.model, enabled=self.merge_lora_for_generation and not self.sharded_generation), \
                self._prefix_cache_block():
            if self.generation_dtype is None or self._sampler is not None:  # none asked for, or the block's own
                yield
                return
            self._sampler = sampler_copy(self.accelerator.unwrap_model(self.model), self.generation_dtype)
            try:
                yield
            finally:
                self._sampler = None

    @contextmanager
    def _prefix_cache_block(self) -> Iterator[None]:
        """The outermost `generation_weights` block keeps one prefix cache for its calls (the weights are fixed
        in it) and logs the share of prompt tokens it spared (`generation/prompt_reused`). Off for sharded
        models (each prefill would be a collective of unequal length across processes) and for models whose
        cache is not plain full attention (`prefix_cache.supports`)."""
        if (self._prefix_cache is not None or self.prefix_cache_bytes <= 0 or self.sharded_generation
                or not supports(self.accelerator.unwrap_model(self.model))):
            yield
            return
        self._prefix_cache = PrefixCache(max_bytes=self.prefix_cache_bytes)
        try:
            yield
        finally:
            stats, self._prefix_cache = self._prefix_cache.stats, None
            self.last_prefill = stats
            if stats.prompt_tokens:
                self.log_metric("generation/prompt_reused", stats.reused_share)

    @property
    def sharded_generation(self) -> bool:
        """Whether every generation call is a collective of all processes: the model is sharded (DeepSpeed
        ZeRO-3, FSDP), so generating gathers its parameters. `SKILLRISE_LOCKSTEP_GENERATION=1` forces it (to
        test the lockstep protocol where no sharding runs, as on a CPU box)."""
        if os.environ.get("SKILLRISE_LOCKSTEP_GENERATION") == "1" or self.is_fsdp_enabled:
            return True
        plugin = getattr(self.accelerator.state, "deepspeed_plugin", None) if self.is_deepspeed_enabled else None
        return bool(plugin is not None and getattr(plugin, "zero_stage", 0) == 3)

    @property
    def template_kwargs(self) -> dict[str, Any]:
        """Keyword arguments TRL passes to the chat template (e.g. enable_thinking)."""
        return dict(self.chat_template_kwargs or {})

    @property
    def pad_token_id(self) -> int:
        return self._tokenizer.pad_token_id

    @property
    def batch_token_normalised(self) -> bool:
        """Whether TRL's loss is already a mean over the whole batch's completion tokens (dapo and kin)."""
        return self.loss_type in BATCH_TOKEN_NORMALISED

    @property
    def sequence_mean_loss(self) -> bool:
        """Whether TRL's loss averages per-row means (grpo, dr_grpo...), as opposed to token means."""
        return self.loss_type not in BATCH_TOKEN_NORMALISED + ("bnpo",)

    @contextmanager
    def entropy_scale(self, factor: float) -> Iterator[None]:
        """Scale TRL's entropy bonus coefficient inside the block (micro-batch reweighting)."""
        original = self.entropy_coef
        logged = self._metrics["train"]["entropy_coef"]
        before = len(logged)
        self.entropy_coef = original * factor
        try:
            yield
        finally:
            self.entropy_coef = original
            logged[before:] = [original] * (len(logged) - before)  # TRL logs the coefficient, not its scaling
