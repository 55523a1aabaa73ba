"""`SkillRiseTrainer`: TRL's GRPOTrainer, fed with env rollouts; read top to bottom.

What TRL does, unchanged: generation (HF generate on CPU, vLLM colocated on GPUs with weight sync; its server
mode is refused: `vllm_settings`), the
clipped policy loss (`loss_type`, `epsilon`, `delta` as the dual clip, the entropy bonus), the optimizer, LoRA
via PEFT, accelerate/DeepSpeed, checkpoints and resume. Every use of TRL's private API lives in
`trl_adapter.GRPOAdapter`, this class's base; here: what a step does.

One training step (`rollout_batch`): play S sequences x G trials (`rollout.py`, on N envs reused across the
trials: `envs`), assign credit (`credit.py`: solve turns their task's reward, curate turns the discounted
later rewards, group-relative advantages per (group, position, role)), and return one row per trained model
call with its advantage.

Batching, three levels, and nothing else:

1. Rollout -> optimizer steps. One rollout feeds `updates_per_rollout` optimizer steps, each of
   `grad_accum` TRL micro-steps. TRL asks for a new rollout every `steps_per_generation` micro-steps, so
   ``steps_per_generation = grad_accum * updates_per_rollout`` and rollout r is the one TRL asks for at
   optimizer step ``r * updates_per_rollout`` (hence ``global_step // updates_per_rollout``). TRL slices the
   rollout's rows into `steps_per_generation` equal parts, one per micro-step, so rows are padded with
   empty (all-masked) rows to a multiple of it: TRL's split would drop remainder rows silently.
2. Old log-probs. With ``updates_per_rollout > 1`` the later updates of a rollout are made by a policy
   that has already moved, so the rollout's rows carry the sampling policy's log-probs
   (``old_per_token_logps``) and TRL's ratio and clip compare against them. With one update per rollout
   the old policy is the current one and TRL uses the detached current log-probs. With
   ``generation_dtype`` (e.g. bfloat16 on a CPU) a reduced-precision copy of the policy samples: it is the
   behaviour policy, so its log-probs of the drawn tokens (recorded while sampling) are the old ones
   whatever ``updates_per_rollout``, TRL's ratio is policy / sampler (an importance weight for the
   precision mismatch) and its clip bounds it; TRL's ``clip_ratio/*`` metrics show how often it bites.
3. Token-budget micro-batches. Within one micro-step, `compute_loss` packs rows (longest first) into
   micro-batches of at most `micro_batch_tokens` tokens, backpropagates all but the last itself and hands
   the last to the Trainer; each is weighted so the sum is TRL's loss on the whole micro-step (TRL scales
   its loss for gradient accumulation itself, so the manual backward needs no extra factor:
   tests/test_trl_contract.py checks grad_accum=2 with packing against one pass).

Generation is batched apart from these: each rollout round generates the prompts of the trials in play
together (at most N, the env pool's size, in calls of at most `generation_batch`; with `overlap`, the
trials that wait while other envs step), and the rows come back in the same order whatever N. Each prompt
samples from an RNG seeded by its trial and turn (`generate_ids(..., seeds)`), so which prompts share a
call does not change the tokens drawn on HF generate (vLLM excepted); see rollout.py, "Determinism".

TRL's dataset is a placeholder: the envs own the prompts. It has one generation batch of rows so TRL's
dataloader turns; `num_generations=2` and `per_device_train_batch_size=2` only satisfy TRL's checks on that
placeholder (TRL wants at least two generations per prompt); neither is a property of the rollout.

Also: `training_step` stops with `NonFiniteLossError` on a NaN/inf loss, before the optimizer step, so the
last checkpoint on disk stays the last good one; `FiniteWeightsCallback` does the same for the weights.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import warnings
from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Iterator

import torch
from transformers import TrainerCallback

from skillrise_train.trl_adapter import GRPOAdapter, GRPOConfig, check_trl_version, pad, vllm_engine_admits

from skillrise_gym.backends.base import ConfigurationError
from skillrise_gym.prefix_cache import supports
from skillrise_gym.records import write_jsonl
from skillrise_train.config import TrainConfig
from skillrise_train.grpo_args import make_grpo_config, resolve_prompt_style, vllm_settings
from skillrise_train.distributed import LockstepGeneration, Ranks, common_packing
from skillrise_train.rollout import RolloutEngine
from skillrise_train.rollout_setup import default_splits, training_episode
from skillrise_train.samples import Completion, RolloutResult, merge_results, rollout_stats
from skillrise_train.shared_prefix import PrefixPlan, plan_rows

#: what a process with nothing to generate sends in a lockstep generation call (its output is thrown away)
PLACEHOLDER_PROMPT = "ok"


def _turn_keys(samples: list[Any]) -> list[tuple[str, int]]:
    """(trial, how many turns of that trial came before) of each sample: a turn's identity in any ordering
    that keeps each trial's turns in play order (a process's own rollout, or every process's merged)."""
    seen: dict[str, int] = defaultdict(int)
    keys = []
    for sample in samples:
        keys.append((sample.turn.trial_id, seen[sample.turn.trial_id]))
        seen[sample.turn.trial_id] += 1
    return keys


#: micro-batch token budget on a CPU (`--micro-batch-tokens -1`): larger passes are no faster there
CPU_MICRO_BATCH_TOKENS = 1024
#: GPU memory per token of a forward+backward pass, per unit of hidden width x layers (bytes): a bound a
#: little above what `gpu_check.py` (benchmarks/) measured for SmolLM2-135M (docs/train.md, "On a GPU")
GPU_BYTES_PER_TOKEN_WIDTH_LAYER = 48


def auto_micro_batch_tokens(device: Any, model_config: Any = None, share: float = 0.25) -> int:
    """The `--micro-batch-tokens -1` budget: 1024 tokens on a CPU; on a GPU, the power of two (1024 to
    32768) whose forward+backward fits in `share` of the device's memory at `GPU_BYTES_PER_TOKEN_WIDTH_LAYER`
    bytes per token per hidden unit and layer (with SmolLM2-135M: 32768 on an H200, 4096 on a 24 GB GPU)."""
    device = torch.device(device)
    if device.type != "cuda":
        return CPU_MICRO_BATCH_TOKENS
    hidden = getattr(model_config, "hidden_size", None) or 4096
    layers = getattr(model_config, "num_hidden_layers", None) or 32
    memory = torch.cuda.get_device_properties(device).total_memory
    fits = share * memory / (GPU_BYTES_PER_TOKEN_WIDTH_LAYER * hidden * layers)
    budget = CPU_MICRO_BATCH_TOKENS
    while budget * 2 <= min(fits, 32768):
        budget *= 2
    return budget


class NonFiniteLossError(RuntimeError):
    """The loss, or the weights after an optimizer step, became NaN or infinite; training stopped before
    anything non-finite was saved."""


class FiniteWeightsCallback(TrainerCallback):
    """After every optimizer step and before its checkpoint is written, every trainable weight must be
    finite (a loss can be finite while an update, e.g. from a huge learning rate, is not)."""

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if model is None:
            return control
        trained = [(name, param.detach()) for name, param in model.named_parameters() if param.requires_grad]
        if not trained:
            return control
        device = trained[0][1].device  # one device sync per step, not one per parameter
        if bool(torch.stack([torch.isfinite(p).all().to(device) for _, p in trained]).all()):
            return control
        for name, param in trained:
            if not bool(torch.isfinite(param).all()):
                raise NonFiniteLossError(
                    f"the weights became non-finite after the optimizer step of step {state.global_step} ({name}); "
                    f"stopped before saving them. The last good checkpoint is in {args.output_dir} (resume with "
                    "--resume); try a lower --lr."
                )
        return control


def _unused_reward(completions: list, **kwargs: Any) -> list[float]:
    """GRPOTrainer requires a reward source; rewards here come from the envs, so this is never called."""
    raise RuntimeError("SkillRiseTrainer scores completions through the environments, not reward functions")


class SkillRiseTrainer(GRPOAdapter):
    """GRPOTrainer whose batches are the turns of SkillRise (or GRPO-baseline) rollouts."""

    def __init__(
        self,
        config: TrainConfig,
        model: Any,
        tokenizer: Any,
        rollout: RolloutEngine,
        args: GRPOConfig | None = None,
        peft_config: Any = None,
        callbacks: list | None = None,
    ) -> None:
        from datasets import Dataset

        self.config = config
        self.rollout = rollout
        args = args or make_grpo_config(config)
        placeholder = Dataset.from_dict({"prompt": ["(prompts come from the environments)"] * args.generation_batch_size})
        vllm_settings(config, args)
        # a rollout's generation call holds up to generation_batch prompts (evaluation's too)
        with vllm_engine_admits(min(config.generation_batch, max(rollout.trials_per_step, config.eval_sequences))):
            super().__init__(
                model=model,
                reward_funcs=_unused_reward,
                args=args,
                train_dataset=placeholder,
                processing_class=tokenizer,
                peft_config=peft_config,
                callbacks=callbacks,
            )
        if peft_config is not None:  # the adapter names the model as the user did, not this machine's path
            for adapter in getattr(self.model, "peft_config", {}).values():
                adapter.base_model_name_or_path = config.model
            # peft then looks for that name's config.json when saving (to see whether the vocabulary grew); an
            # alias such as "tiny" has none, and the embeddings are not trained here
            warnings.filterwarnings("ignore", message="Could not find a config file in", category=UserWarning)
        self.ranks = Ranks(self.accelerator.process_index, self.accelerator.num_processes)
        self.auto_micro_batch_tokens = 0 if self.is_deepspeed_enabled else auto_micro_batch_tokens(
            self.accelerator.device, getattr(model, "config", None))
        if self.is_deepspeed_enabled and config.micro_batch_tokens > 0:
            raise ConfigurationError(
                "DeepSpeed steps its optimizer inside every backward pass, and --micro-batch-tokens packs several "
                "backward passes into one micro-step: use --micro-batch-tokens 0 and --grad-accum to bound memory")
        self.max_prompt_tokens = self._prompt_budget(config)
        from skillrise_gym.models import template_system_prompt

        #: the system message the chat template adds when none is given (SmolLM2's), kept as training saw it
        self.template_system_prompt = (template_system_prompt(tokenizer, self.template_kwargs)
                                       if config.system_prompt is None else None)
        #: the episode this run trains on, made once (its env part is the rollout's): every prompt is encoded
        #: from it, in-training evaluation plays it on the held-out split, and it is saved as episode.json
        #: beside the weights of every checkpoint and of final/ (`skillrise_gym.episode`)
        self.episode = rollout.spec.replace(max_new_tokens=config.max_new_tokens,
                                            max_prompt_tokens=self.max_prompt_tokens,
                                            system_prompt=config.system_prompt,
                                            chat_template_kwargs=self.template_kwargs)
        self.framing = self.episode.framing()  # read for every prompt encoded: made once
        if config.generation_dtype is not None:
            if self.sharded_generation:
                raise ConfigurationError("--generation-dtype copies the whole policy for generation; a sharded "
                                         "model (FSDP, ZeRO-3) has no whole copy on one process: leave it unset")
            self.generation_dtype = getattr(torch, config.generation_dtype)
        self.prefix_cache_bytes = config.prefix_cache_mb << 20
        self.last_rollout: RolloutResult | None = None
        self.last_stats: dict[str, float] = {}
        self._step_started = time.perf_counter()

    @classmethod
    def from_config(cls, config: TrainConfig, callbacks: list | None = None, **arg_overrides: Any) -> "SkillRiseTrainer":
        """Model, tokenizer, envs and TRL arguments from a TrainConfig (what the CLI runs)."""
        from skillrise_gym.models import load_model_and_tokenizer

        check_trl_version()
        args = make_grpo_config(config, **arg_overrides)
        from skillrise_train.checkpoints import completion_callback

        # the finite check runs before the save, the completion marker after it (checkpoints.py)
        callbacks = list(callbacks or []) + [FiniteWeightsCallback(), completion_callback()]
        threads = str(torch.get_num_threads())
        if not torch.cuda.is_available():
            from skillrise_gym.models import set_torch_threads

            threads = set_torch_threads(config.threads)  # 0: by the cores and the load (models.auto_threads)
        model, tokenizer = load_model_and_tokenizer(config.model)
        peft_config = None
        if config.lora:
            from peft import LoraConfig

            peft_config = LoraConfig(
                r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0, target_modules="all-linear",
                task_type="CAUSAL_LM",
            )
        backend_options = dict(config.backend_options)
        episode = training_episode(config, resolve_prompt_style(config.prompt_style, model))
        rollout = RolloutEngine.from_train_config(config, episode, ranks=Ranks(args.process_index, args.world_size))
        try:
            trainer = cls(config, model, tokenizer, rollout, args=args, peft_config=peft_config, callbacks=callbacks)
            trainer.torch_threads = threads  # and how they were chosen: the run's first line shows it
            return trainer
        except BaseException:
            rollout.close()
            raise

    # ------------------------------------------------------------------ warm start
    def train(self, resume_from_checkpoint: Any = None, **kwargs: Any):
        """TRL's training loop, after the format warm start on a fresh run (a resumed run has it in its weights)."""
        if self.config.warmstart_steps and not resume_from_checkpoint:
            self.warm_start()
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    def warm_start(self) -> list[float]:
        """Supervised format warm start (warmstart.py) on prompts of this run's own envs and prompt style."""
        from skillrise_train.warmstart import format_examples, warm_start

        c = self.config
        env = self.rollout.sequence_env()  # the run's own episodes (lamer: attempts with reflections)
        try:
            examples = format_examples(env, c.warmstart_sequences, seed=c.seed, reading=c.warmstart_reading,
                                       documents=c.warmstart_documents)
        finally:
            env.close()
        say = (lambda line: print(line, flush=True)) if self.accelerator.is_main_process else None
        losses = warm_start(self.model, self.processing_class, self.encode_prompt, examples, c.warmstart_steps,
                            batch_size=c.warmstart_batch, lr=c.warmstart_lr, seed=c.seed, progress=say)
        self.warmstart_losses = losses
        if self.rollout.algorithm.writes_skills:  # what it taught, on sequences it did not train on
            self.warmstart_check = self.check_warm_start()
        return losses

    def check_warm_start(self, sequences: int = 40) -> Any:
        """`warmstart.check_format` on training-split sequences the warm start's examples did not come from
        (greedy): the share of notes followed, of curate turns copying trajectory clauses, of well-formed
        answers; printed, and written to output_dir/warmstart.json."""
        from pathlib import Path

        from skillrise_train.warmstart import check_format, greedy_answerer

        c = self.config
        env = self.rollout.sequence_env()  # K tasks of a family (only skill-writing algorithms are checked)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                result = check_format(env, greedy_answerer(self.model, self.processing_class, self.encode_prompt,
                                                           c.max_new_tokens), sequences=sequences, seed=c.seed + 1,
                                      documents=c.warmstart_documents)
        finally:
            env.close()
            self.model.train(was_training)
        if self.accelerator.is_main_process:
            several = ("" if result.follow_several is None else
                       f" (of several rules, the one about the item: {result.follow_several:.0%})")
            print(f"warm start: follows a note {result.follow:.0%}{several}, curate turns copying trajectory "
                  f"clauses {result.copy:.0%}, well-formed {result.valid:.0%} ({sequences} sequences it did not "
                  f"train on)", flush=True)
            out = Path(self.args.output_dir)
            out.mkdir(parents=True, exist_ok=True)
            (out / "warmstart.json").write_text(json.dumps({**vars(result), "steps": c.warmstart_steps,
                                                             "final_loss": self.warmstart_losses[-1]
                                                             if self.warmstart_losses else None}, indent=2))
        return result

    # ------------------------------------------------------------------ saving
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """The weights (or adapter), as TRL saves them, and beside them the episode they were trained on
        (episode.json: what `skillrise-bench --model FOLDER` plays unless told otherwise); every checkpoint
        and final/ go through here."""
        super().save_model(output_dir, _internal_call)
        if self.args.should_save:
            self.episode.save(output_dir or self.args.output_dir, algo=self.config.algo,
                              held_out_split=self.config.eval_split or default_splits(self.config.env)[1],
                              template_system_prompt=self.template_system_prompt,
                              temperature=self.config.temperature)

    # ------------------------------------------------------------------ prompts and generation
    def _prompt_budget(self, config: TrainConfig) -> int:
        """Longest prompt in tokens: the flag, else the model's context minus the completion budget; with
        vLLM, never more than its engine's length (`vllm_max_model_length`) minus the completion budget."""
        context = int(getattr(self.model.config, "max_position_embeddings", None) or 4096)
        engine = self.args.vllm_max_model_length if self.use_vllm else None
        if engine:
            context = min(context, int(engine))
        if config.max_prompt_tokens > 0:
            if engine and config.max_prompt_tokens + config.max_new_tokens > engine:
                raise ConfigurationError(
                    f"--max-prompt-tokens {config.max_prompt_tokens} + --max-new-tokens {config.max_new_tokens} "
                    f"exceeds vLLM's engine length (vllm_max_model_length {engine}); lower them or raise it")
            return config.max_prompt_tokens
        return max(16, context - config.max_new_tokens)

    def encode_prompt(self, text: str, prefix: str = "") -> tuple[list[int], bool]:
        """Token ids of one prompt (`skillrise_gym.models.encode_chat`, the encoding the hf agent uses too)."""
        from skillrise_gym.models import encode_chat

        framing = self.framing  # the episode's prompt budget, system message and template arguments
        return encode_chat(self.processing_class, text, prefix, max_tokens=framing["max_prompt_tokens"],
                           system_prompt=framing["system_prompt"], template_kwargs=framing["chat_template_kwargs"])

    def generate_completions(self, prompts: list[str], prefixes: list[str] | None = None,
                             seeds: list[int] | None = None) -> list[Completion]:
        """One batched generation through TRL's path (num_generations=1 per prompt); each answer's text is its
        prefix (the observation's answer_prefix) plus the decoded completion. With `seeds` (rollouts give
        one per turn), each prompt samples from its own RNG on HF generate (`generate_ids`)."""
        prefixes = list(prefixes) if prefixes is not None else [""] * len(prompts)
        encoded = [self.encode_prompt(p, pre) for p, pre in zip(prompts, prefixes)]
        prompt_ids = [ids for ids, _ in encoded]
        try:
            completion_ids, logps = self.generate_ids(prompt_ids, seeds, with_logps=True)
        except RuntimeError as exc:  # torch.multinomial on NaN/inf probabilities: weights finite but too large
            if "inf" in str(exc) and "nan" in str(exc):
                raise NonFiniteLossError(
                    "the policy's next-token probabilities became NaN or infinite while sampling (its weights are "
                    f"finite but too large to use). The last good checkpoint is in {self.args.output_dir} (resume "
                    "with --resume); try a lower --lr."
                ) from None
            raise
        texts = self.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
        eos, budget = set(self.eos_token_ids), self.config.max_new_tokens
        return [
            Completion(list(p), list(c), pre + t, truncated, logps[n] if logps is not None else None,
                       cut=len(c) >= budget and not (c and c[-1] in eos))
            for n, ((p, truncated), c, t, pre) in enumerate(zip(encoded, completion_ids, texts, prefixes))
        ]

    # ------------------------------------------------------------------ rollout -> rows
    def rollout_batch(self) -> dict[str, Any]:
        """One rollout, its credit, and its trained turns as one batch of rows (see "Batching" above).

        On several processes (distributed.py) each plays its share of the step's sequences; credit,
        statistics and records come from every process's turns together, identically on each, and each
        trains on the rows of its own turns."""
        step = self.state.global_step // self.config.updates_per_rollout  # the rollout's index
        plans = self.rollout.plan(self.rollout.sequences(step, self.config.S), tag=f"step{step}")
        generate = self.rollout_generate()
        calls = [0]

        def counted(*args: Any) -> list[Completion]:
            calls[0] += 1
            return generate(*args)

        with self.generation_weights():  # LoRA merged once for the rollout (the weights do not change in it)
            local = self.rollout.play(self.rollout.mine(plans), counted, step=step)
        if isinstance(generate, LockstepGeneration):
            generate.finish()  # join the other ranks' generation calls until every rank's rollout ended
            calls[0] = generate.calls  # placeholders included
        # every process's turns, without their token ids (each process trains on its own rows)
        light = dataclasses.replace(local, samples=[dataclasses.replace(s, prompt_ids=[], completion_ids=[],
                                                                        sampler_logps=None)
                                                    for s in local.samples])
        result = merge_results(self.ranks.gather(light), plans)
        # the algorithm's credit rule, then the overlong penalty (algorithms.py: every algorithm alike)
        returns, advantages = self.rollout.algorithm.credit(result, self.config)
        self.last_rollout = result
        self.last_stats = rollout_stats(result, advantages, self.config.K)
        # curate credit "none": solve turns only
        trained = self.rollout.algorithm.trained_turns([s.turn for s in local.samples], self.config)
        # per process: rows trained and generation calls made (every process must agree on the collectives)
        counts = self.ranks.gather((len(trained), calls[0]))
        self.last_stats.update({
            "rows/per_process_min": float(min(c[0] for c in counts)),
            "rows/per_process_max": float(max(c[0] for c in counts)),
            "generation/calls_per_process_min": float(min(c[1] for c in counts)),
            "generation/calls_per_process_max": float(max(c[1] for c in counts)),
        })
        for name, value in self.last_stats.items():
            self.log_metric(name, value)
        if self.config.record_turns and self.ranks.main:
            for sample, ret, adv in zip(result.samples, returns, advantages):
                sample.turn.extra.update({"return": float(ret), "advantage": float(adv), "algo": self.config.algo})
            write_jsonl(f"{self.args.output_dir}/turns.jsonl", [s.turn for s in result.samples])
        # this process's turns, with the advantages credit gave them in the whole rollout
        by_turn = dict(zip(_turn_keys(result.samples), advantages))
        local_advantages = [by_turn[key] for key in _turn_keys(local.samples)]
        batch = self.rows_to_batch(
            [local.samples[n].prompt_ids for n in trained], [local.samples[n].completion_ids for n in trained],
            [local_advantages[n] for n in trained],
        )
        sampled = [local.samples[n].sampler_logps for n in trained]
        if trained and all(logps is not None for logps in sampled):
            # a reduced-precision copy sampled (--generation-dtype): its log-probs are the old policy's, so
            # TRL's ratio is policy / sampler and its clip bounds the mismatch (module docstring, "Batching")
            batch["old_per_token_logps"] = self.sampler_log_probs(batch, sampled)
        elif self.config.updates_per_rollout > 1:  # batching level 2 (module docstring)
            batch["old_per_token_logps"] = self.old_log_probs(batch)
        return batch

    def rollout_generate(self) -> Any:
        """The generate function of a rollout: the trainer's own, or, where every generation call is a
        collective (sharded models), one that every process calls equally often (`LockstepGeneration`)."""
        if not (self.ranks.several and self.sharded_generation):
            return self.generate_completions
        return LockstepGeneration(self.generate_completions,
                                  lambda: self.generate_completions([PLACEHOLDER_PROMPT], [""], [0]), self.ranks)

    def sampler_log_probs(self, batch: dict[str, Any], logps: list[list[float]]) -> torch.Tensor:
        """The sampler's per-token log-probs as a tensor aligned with `batch`'s completion columns (padding
        rows and positions 0; they are masked)."""
        old = torch.zeros(batch["completion_ids"].shape, dtype=torch.float32)
        for row, values in enumerate(logps):
            if values:
                old[row, :len(values)] = torch.tensor(values, dtype=torch.float32)
        return old.to(batch["completion_ids"].device)

    @torch.no_grad()
    def old_log_probs(self, batch: dict[str, Any]) -> torch.Tensor:
        """Log-probs of the completion tokens under the current policy, in token-budget micro-batches."""
        width = batch["completion_ids"].size(1)
        old = torch.zeros(batch["completion_ids"].shape, dtype=torch.float32, device=batch["completion_ids"].device)
        for rows in self.pack_rows(batch):
            prompt_mask = batch["prompt_mask"][rows]
            first = int(prompt_mask.any(dim=0).nonzero()[0])
            ids = torch.cat([batch["prompt_ids"][rows][:, first:], batch["completion_ids"][rows]], dim=1)
            mask = torch.cat([prompt_mask[:, first:], batch["completion_mask"][rows]], dim=1)
            old[rows] = self.policy_logps(self.model, ids, mask, width).float()
        return old

    def rows_to_batch(self, prompt_ids: list[list[int]], completion_ids: list[list[int]], advantages) -> dict[str, Any]:
        """Left-padded prompts, right-padded completions, one advantage per row; padded with empty rows."""
        device = self.accelerator.device
        rows = len(prompt_ids)
        multiple = self.args.steps_per_generation
        # every process the same row count: TRL gathers per-row tensors and splits rows into micro-steps
        padded = self.ranks.max(rows)
        missing = padded - rows + (-padded) % multiple
        pad_id = self.pad_token_id
        prompts = [torch.tensor(p, dtype=torch.long) for p in prompt_ids] + [torch.tensor([pad_id])] * missing
        completions = [torch.tensor(c or [pad_id], dtype=torch.long) for c in completion_ids]
        completions += [torch.tensor([pad_id])] * missing
        prompt_mask = [torch.ones_like(p) for p in prompts[:rows]] + [torch.zeros(1, dtype=torch.long)] * missing
        completion_mask = [torch.full_like(c, int(bool(src))) for c, src in zip(completions[:rows], completion_ids)]
        completion_mask += [torch.zeros(1, dtype=torch.long)] * missing
        advantage = torch.tensor(list(advantages) + [0.0] * missing, dtype=torch.float32)
        batch = {
            "prompt_ids": pad(prompts, padding_value=pad_id, padding_side="left").to(device),
            "prompt_mask": pad(prompt_mask, padding_value=0, padding_side="left").to(device),
            "completion_ids": pad(completions, padding_value=pad_id, padding_side="right").to(device),
            "completion_mask": pad(completion_mask, padding_value=0, padding_side="right").to(device),
            "advantages": advantage.to(device),
        }
        # a padding row must keep one attended position so attention never sees an all-masked row
        if missing:
            batch["prompt_mask"][rows:, -1] = 1
        batch["num_items_in_batch"] = self.accelerator.gather(batch["completion_mask"].sum()).sum()
        return batch

    # ------------------------------------------------------------------ token-budget micro-batches
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """TRL's loss over micro-batches of at most `micro_batch_tokens` tokens.

        Rows are sorted by length and packed under the budget, so memory is bounded whatever a step's turn
        count, and little compute goes to padding. All micro-batches but the last are backpropagated here;
        the last one's loss is returned for the Trainer's own backward (plus the others' detached values,
        for the log). Each micro loss is weighted so the sum equals TRL's loss on the whole batch.
        """
        if return_outputs:
            raise ValueError("SkillRiseTrainer does not return outputs")
        plan = self.prefix_plan(inputs)
        groups = self.pack_rows(inputs) if plan is None else \
            [torch.tensor(g, device=inputs["completion_mask"].device) for g in plan.groups]
        if plan is None and len(groups) == 1 and not self.ranks.several:
            return self.policy_loss(model, inputs)
        completion_mask = inputs["completion_mask"]
        rows_total = completion_mask.size(0)
        tokens_total = completion_mask.sum().clamp(min=1)
        # the entropy bonus is a token mean over every process's micro-step (DDP averages the processes'
        # gradients, so each process's share is weighted by its tokens against the mean process's)
        entropy_tokens = self.ranks.total(int(completion_mask.sum())) / self.ranks.world_size if self.ranks.several \
            else float(tokens_total)
        done = torch.zeros((), device=completion_mask.device)
        try:
            for number, rows in enumerate(groups):
                micro = {k: (v[rows] if isinstance(v, torch.Tensor) and v.dim() > 0 and v.size(0) == rows_total
                             else v) for k, v in inputs.items()}
                tokens = micro["completion_mask"].sum()
                if self.batch_token_normalised:
                    weight = 1.0  # already normalised by the whole batch's token count
                elif self.sequence_mean_loss:  # per-sequence means (grpo, dr_grpo, luspo, sapo)
                    weight = len(rows) / rows_total
                else:  # bnpo: a token mean over this micro-batch
                    weight = float(tokens / tokens_total)
                # TRL's entropy bonus is a per-micro-batch token mean: reweight it to the whole batch's
                share = float(tokens) / max(1.0, entropy_tokens)
                with self.entropy_scale(share / weight if weight else 0.0), self.scoring_shared(plan, rows):
                    loss = self.policy_loss(model, micro) * weight
                if plan is not None:  # every backward here: a node's own backward follows its last row's
                    self.accelerator.backward(loss)
                    plan.release(rows.tolist())
                    done = done + loss.detach()
                elif number < len(groups) - 1:
                    self.accelerator.backward(loss)
                    done = done + loss.detach()
        finally:
            if plan is not None:
                plan.close()
        if plan is not None:
            # every backward pass has run: the loss returned for the Trainer's own backward carries no graph
            return done.requires_grad_()
        return loss + done

    def prefix_plan(self, inputs: dict[str, Any]) -> PrefixPlan | None:
        """The update's shared-prefix plan for this batch (shared_prefix.py), or None: `--share-prefixes`
        off, several processes (DDP all-reduces in every backward pass, and a node's backward comes after
        its rows'), a sharded model, gradient checkpointing, a cache that is not plain full attention, or a
        batch whose shared prefixes would save under a tenth of its tokens."""
        if (not self.config.share_prefixes or self.ranks.several or self.sharded_generation
                or self.is_deepspeed_enabled or self.config.gradient_checkpointing
                or not supports(self.accelerator.unwrap_model(self.model))):
            return None
        mask = inputs["prompt_mask"].bool()
        prompts = [row[keep].tolist() for row, keep in zip(inputs["prompt_ids"], mask)]
        plan = plan_rows(prompts, inputs["completion_mask"].size(1), self.micro_batch_budget)
        plain, shared = plan.tokens()
        self.log_metric("update/tokens_run", shared / max(1, plain))
        return plan if shared <= 0.9 * plain else None

    @contextmanager
    def scoring_shared(self, plan: PrefixPlan | None, rows: torch.Tensor) -> Iterator[None]:
        """While the loss scores micro-batch `rows` of `plan`, its log-probs run on the rows' shared prefix."""
        if plan is None:
            yield
            return
        self._shared_rows = (plan, rows.tolist())
        try:
            yield
        finally:
            self._shared_rows = None

    @property
    def micro_batch_budget(self) -> int:
        """`--micro-batch-tokens`, with -1 resolved for this device (`auto_micro_batch_tokens`); 0: no limit."""
        budget = self.config.micro_batch_tokens
        return self.auto_micro_batch_tokens if budget < 0 else budget

    def pack_rows(self, inputs: dict[str, Any]) -> list[torch.Tensor]:
        """Row indices of each micro-batch: rows sorted by length, packed while rows x longest <= budget; on
        several processes, micro-batches of the same sizes on every one (`distributed.common_packing`)."""
        budget = self.micro_batch_budget
        rows_total = inputs["completion_mask"].size(0)
        if budget <= 0 or rows_total <= 1:
            return [torch.arange(rows_total)]
        lengths = (inputs["prompt_mask"].sum(1) + inputs["completion_mask"].size(1)).cpu()
        order = torch.argsort(lengths, descending=True, stable=True)
        mine = [int(lengths[i]) for i in order.tolist()]
        sizes = common_packing(self.ranks.gather(mine) if self.ranks.several else [mine], budget)
        device = inputs["completion_mask"].device
        groups, start = [], 0
        for size in sizes:
            groups.append(torch.sort(order[start:start + size]).values.to(device))
            start += size
        return groups

    # ------------------------------------------------------------------ safety
    def training_step(self, model, inputs, num_items_in_batch):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if not math.isfinite(float(loss.detach().float().cpu())):
            raise NonFiniteLossError(
                f"the loss became {float(loss)} at step {self.state.global_step + 1}; stopped before the optimizer "
                f"step. The last good checkpoint is in {self.args.output_dir} (resume with --resume); try a lower "
                f"--lr or float32."
            )
        return loss


def save_warm_started(config: Any, out_dir: str) -> str:
    """Run `config`'s format warm start alone (no RL step) and save the model and tokenizer to `out_dir`, a
    model folder that `--model` accepts: the shared starting point of experiment arms, and the 'untrained'
    policy they are compared with. Returns `out_dir`."""
    import shutil
    from dataclasses import replace
    from pathlib import Path

    if config.warmstart_steps < 1:
        raise ValueError("save_warm_started needs warmstart_steps >= 1")
    scratch = Path(str(out_dir) + ".tmp")
    trainer = SkillRiseTrainer.from_config(replace(config, steps=1, record_turns=False, output_dir=str(scratch)))
    try:
        trainer.warm_start()
        trainer.save_model(str(out_dir))
    finally:
        trainer.rollout.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return str(out_dir)
