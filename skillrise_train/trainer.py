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
from typing import Any

import torch
from transformers import TrainerCallback

from skillrise_train.trl_adapter import GRPOAdapter, GRPOConfig, check_trl_version, pad, vllm_engine_admits

from skillrise_gym.backends.base import ConfigurationError
from skillrise_gym.records import write_jsonl
from skillrise_train.config import TRL_FIELDS, TrainConfig
from skillrise_train.credit import assign_credit, gigpo_advantages, lamer_credit, trained_turns
from skillrise_train.distributed import LockstepGeneration, Ranks, common_packing
from skillrise_train.rollout import Completion, RolloutEngine, RolloutResult, merge_results, rollout_stats

#: what a process with nothing to generate sends in a lockstep generation call (its output is thrown away)
PLACEHOLDER_PROMPT = "ok"


def _turn_keys(samples: list[Any]) -> list[tuple[str, int]]:
    """(trial, how many turns of that trial came before) of each sample: a turn's identity in any ordering
    that keeps each trial's turns in play order (a process's own rollout, or every process's merged)."""
    seen: dict[str, int] = defaultdict(int)
    keys = []
    for sample in samples:
        keys.append((sample.tag.trial, seen[sample.tag.trial]))
        seen[sample.tag.trial] += 1
    return keys


#: micro-batch token budget on a CPU (`--micro-batch-tokens -1`): larger passes are no faster there
CPU_MICRO_BATCH_TOKENS = 1024
#: GPU memory per token of a forward+backward pass, per unit of hidden width x layers (bytes): measured
#: 45 on an H200 for SmolLM2-135M's shape (24339 MiB peak at 32768 tokens, benchmarks/results/gpu_check.json)
GPU_BYTES_PER_TOKEN_WIDTH_LAYER = 48


def auto_micro_batch_tokens(device: Any, model_config: Any = None, share: float = 0.25) -> int:
    """The `--micro-batch-tokens -1` budget: 1024 tokens on a CPU; on a GPU, the power of two (1024 to
    32768) whose forward+backward fits in `share` of the device's memory at `GPU_BYTES_PER_TOKEN_WIDTH_LAYER`
    bytes per token per hidden unit and layer. On an H200 with SmolLM2-135M that is 32768, where an update
    runs 25x the tokens/s of 1024-token passes; on a 24 GB GPU, 4096."""
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


#: models with fewer parameters than this get compact prompts under prompt_style "auto"
COMPACT_BELOW_PARAMETERS = 1_000_000_000


def vllm_settings(config: TrainConfig, args: GRPOConfig) -> None:
    """The vLLM settings the trainer can run, or a ConfigurationError saying why not: colocate mode only (the
    server mode's client samples a whole call with one seed and its weight sync is untested here), one
    GPU per engine (with tensor parallelism TRL all-gathers every call's prompts within the TP group, and
    rollouts make a different number of calls on each process), and an engine longer than a completion."""
    if not args.use_vllm:
        return
    check_vllm_installed()
    if args.vllm_mode != "colocate":
        raise ConfigurationError(f"vllm_mode {args.vllm_mode!r}: only colocate is supported (vLLM inside each "
                                 "training process); TRL's server mode (trl vllm-serve) is not")
    if int(args.vllm_tensor_parallel_size or 1) > 1:
        raise ConfigurationError(
            f"vllm_tensor_parallel_size {args.vllm_tensor_parallel_size}: not supported. TRL gathers every "
            "generation call's prompts across the processes of a tensor-parallel group, and rollouts make a "
            "different number of calls on each process (their trials last different numbers of turns). Use one "
            "GPU per vLLM engine (tensor parallel size 1) with a model that fits it")
    engine = args.vllm_max_model_length
    if engine is not None and int(engine) <= config.max_new_tokens + 16:
        raise ConfigurationError(f"vllm_max_model_length {engine} leaves no room for prompts after "
                                 f"--max-new-tokens {config.max_new_tokens}; raise it (or lower --max-new-tokens)")


def check_vllm_installed() -> None:
    """--use-vllm without vLLM: a one-line error naming the extra (ConfigurationError, exit 2)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise ConfigurationError("--use-vllm needs vLLM, which is not installed: pip install 'skillrise-gym[vllm]' "
                                 "(a GPU machine; vLLM does not run on CPUs)")


def resolve_prompt_style(style: str, model: Any) -> str | None:
    """The env's prompt style: "auto" means compact for small models (a 135M model asked to reason first never
    reaches its answer tags within a short budget), else the backend's default (None)."""
    if style != "auto":
        return style
    return "compact" if model.num_parameters() < COMPACT_BELOW_PARAMETERS else None


def make_grpo_config(config: TrainConfig, **overrides: Any) -> GRPOConfig:
    """The GRPOConfig that realises a TrainConfig, in three parts: the fields of `config.TRL_FIELDS` (the one
    mapping of our names to TRL's), what the trainer fixes (`trainer_fixed_trl_args`), and the
    user's `trl_options` (any other GRPOConfig field; those of the first two parts are refused)."""
    mapped = {trl: getattr(config, name) for name, trl in TRL_FIELDS.items()}
    use_cpu = not torch.cuda.is_available()
    mapped["delta"] = mapped["delta"] if mapped["delta"] > 0 else None  # dual_clip 0 disables the bound
    fixed = trainer_fixed_trl_args(config, use_cpu)
    check_trl_options(config.trl_options, set(fixed))
    options = dict(config.trl_options)
    # save_total_limit is enforced by the completion callback among complete checkpoints, after the new one
    # is marked (checkpoints.rotate); in TRL's hands it deletes the older ones before the marker exists
    save_total_limit = options.pop("save_total_limit", None)
    try:
        args = GRPOConfig(**{**fixed, **mapped, **options, **overrides})
    except (TypeError, ValueError) as exc:
        if not config.trl_options:
            raise
        raise ConfigurationError(f"trl_options {dict(config.trl_options)}: GRPOConfig refused them: {exc}") from None
    from skillrise_train.checkpoints import SAVE_LIMIT_ATTRIBUTE

    setattr(args, SAVE_LIMIT_ATTRIBUTE, save_total_limit)
    return args


def trainer_fixed_trl_args(config: TrainConfig, use_cpu: bool) -> dict[str, Any]:
    """GRPOConfig fields the trainer decides (its batching, its rollouts, its checkpoints): not settable."""
    return dict(
        output_dir=config.output_dir,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_steps=config.steps * config.updates_per_rollout,  # TRL counts optimizer steps
        # TRL wants >= 2 generations per prompt; our rows are turns, so these only size the placeholder batches.
        num_generations=2,
        per_device_train_batch_size=2,
        # one rollout feeds updates_per_rollout optimizer steps of grad_accum micro-batches each
        steps_per_generation=config.grad_accum * config.updates_per_rollout,
        num_iterations=1,
        top_p=1.0,
        top_k=0,
        beta=0.0,  # no KL term, no reference model (as the reference)
        chat_template_kwargs={"enable_thinking": False},
        vllm_mode="colocate",
        # on-policy single epoch: the old policy is the current one, no importance correction needed
        vllm_importance_sampling_correction=False,
        fp16=False,
        use_cpu=use_cpu,
        logging_steps=1,
        save_strategy="steps",
        save_steps=max(1, config.save_interval) * config.updates_per_rollout,
        save_only_model=False,
        report_to="none",
        seed=config.seed,
        data_seed=config.seed,
        shuffle_dataset=False,
        remove_unused_columns=False,
        disable_tqdm=True,
        log_completions=False,
        dataloader_num_workers=0,
    )


#: fixed GRPOConfig fields that follow one of our flags
FIXED_FROM_FLAGS = {"output_dir": "--output-dir", "seed": "--seed", "data_seed": "--seed", "max_steps": "--steps",
                    "save_steps": "--save-interval", "steps_per_generation": "--grad-accum and --updates-per-rollout"}
#: GRPOConfig fields `trl_options` may set although the trainer has a default for them
TRL_OPTIONS_ALLOWED = frozenset({"lr_scheduler_type", "warmup_steps", "logging_steps", "report_to", "disable_tqdm"})
_OWN_EVALUATION = "evaluation is the trainer's own held-out bench run: use --eval-sequences and --eval-interval"
#: GRPOConfig fields `trl_options` may not set (TRL would ignore them, or fail later), and what to do instead
TRL_OPTIONS_REFUSED = {
    "resume_from_checkpoint": "continue a run with --resume (it takes the newest complete checkpoint in --output-dir)",
    "push_to_hub": "the trainer never uploads (nothing leaves this machine); upload --output-dir's final/ yourself",
    **{name: _OWN_EVALUATION for name in ("eval_strategy", "eval_steps", "eval_delay", "eval_on_start", "do_eval",
                                          "do_predict", "load_best_model_at_end", "metric_for_best_model",
                                          "greater_is_better", "num_generations_eval")},
}
#: keys of trl_options' generation_kwargs that would override what a flag or the trainer's sampler decides
GENERATION_KWARGS_REFUSED = {
    "max_new_tokens": "--max-new-tokens", "max_length": "--max-new-tokens", "max_tokens": "--max-new-tokens",
    "temperature": "--temperature",
    "min_p": "trl_options' own min_p", "repetition_penalty": "trl_options' own repetition_penalty",
    **{name: None for name in ("do_sample", "top_p", "top_k", "seed", "n", "num_return_sequences", "pad_token_id",
                               "bos_token_id", "eos_token_id", "logprobs")},
}
#: report_to integrations whose pip package is not called as the integration is
REPORT_PACKAGES = {"comet_ml": "comet-ml", "azure_ml": "azureml-core", "flyte": "flytekit", "neptune": "neptune",
                   "kubeflow": "kubeflow"}


def check_trl_options(options: dict[str, Any], fixed: set[str]) -> None:
    """`trl_options` names GRPOConfig fields that nothing else sets (ConfigurationError naming the flag to use):
    not one of ours or the trainer's, not one TRL would ignore or fail on later (`TRL_OPTIONS_REFUSED`), no
    `generation_kwargs` key that overrides a flag, a `save_total_limit` >= 1, and `report_to` integrations
    whose package is installed (they get the trainer's own metrics, those of metrics.jsonl)."""
    import difflib
    from dataclasses import fields as dataclass_fields

    known = {f.name for f in dataclass_fields(GRPOConfig)}
    ours = {trl: name for name, trl in TRL_FIELDS.items()}
    for key in options:
        if key in ours:
            raise ConfigurationError(f"trl_options: set {key} with --{ours[key].replace('_', '-')}, not trl_options")
        if key in FIXED_FROM_FLAGS:
            raise ConfigurationError(f"trl_options: {key} follows {FIXED_FROM_FLAGS[key]}; set that instead")
        if key in fixed and key not in TRL_OPTIONS_ALLOWED:
            raise ConfigurationError(f"trl_options: {key} is decided by the trainer (its batching, rollouts or "
                             "checkpoints; see skillrise_train/trainer.py trainer_fixed_trl_args) and cannot be set")
        if key in TRL_OPTIONS_REFUSED:
            raise ConfigurationError(f"trl_options: {key} cannot be set: {TRL_OPTIONS_REFUSED[key]}")
        if key not in known:
            near = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ConfigurationError(f"trl_options: {key!r} is not a GRPOConfig field{hint}")
    kwargs = options.get("generation_kwargs")
    if kwargs is not None:
        if not isinstance(kwargs, dict):
            raise ConfigurationError(f"trl_options: generation_kwargs must be a JSON object, got {kwargs!r}")
        for key in kwargs:
            if key in GENERATION_KWARGS_REFUSED:
                instead = GENERATION_KWARGS_REFUSED[key]
                raise ConfigurationError(
                    f"trl_options: generation_kwargs.{key} would override " + (f"{instead}; set that instead" if instead
                    else "the trainer's seeded sampler (skillrise_train/sampling.py), which decides it"))
    limit = options.get("save_total_limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigurationError(f"trl_options: save_total_limit must be a whole number >= 1 (complete checkpoints "
                                 f"kept), got {limit!r}")
    if "report_to" in options:
        check_report_to(options["report_to"])


def check_report_to(report_to: Any) -> None:
    """trl_options' `report_to` (transformers' logging integrations: "tensorboard", "wandb", a list, "all",
    "none"): every one named must be known and its package installed, else a one-line ConfigurationError
    naming the package to install."""
    import importlib.util

    from transformers.integrations import integration_utils

    names = [report_to] if isinstance(report_to, str) else report_to
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ConfigurationError(f"trl_options: report_to must be a name or a list of names, got {report_to!r}")
    known = integration_utils.INTEGRATION_TO_CALLBACK
    available = set(integration_utils.get_available_reporting_integrations())
    for name in names:
        if name in ("none", "all") and len(names) == 1:
            continue
        if name not in known:
            raise ConfigurationError(f"trl_options: report_to {name!r} is not a logging integration of transformers "
                                     f"(known: {', '.join(sorted(known))}, or none)")
        package = REPORT_PACKAGES.get(name, name)
        if name not in available and importlib.util.find_spec(package.replace("-", "_")) is None:
            raise ConfigurationError(f"trl_options: report_to {name!r} needs the {package} package, which is not "
                                     f"installed: pip install {package}")


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
        if config.generation_dtype is not None:
            if self.sharded_generation:
                raise ConfigurationError("--generation-dtype copies the whole policy for generation; a sharded "
                                         "model (FSDP, ZeRO-3) has no whole copy on one process: leave it unset")
            self.generation_dtype = getattr(torch, config.generation_dtype)
        self.last_rollout: RolloutResult | None = None
        self.last_stats: dict[str, float] = {}
        self._step_started = time.perf_counter()

    @classmethod
    def from_config(cls, config: TrainConfig, callbacks: list | None = None, **arg_overrides: Any) -> "SkillRiseTrainer":
        """Model, tokenizer, envs and TRL arguments from a TrainConfig (what the CLI runs)."""
        from skillrise_gym.models import load_model_and_tokenizer
        from skillrise_train.rollout import default_splits

        check_trl_version()
        args = make_grpo_config(config, **arg_overrides)
        from skillrise_train.checkpoints import completion_callback

        # the finite check runs before the save, the completion marker after it (checkpoints.py)
        callbacks = list(callbacks or []) + [FiniteWeightsCallback(), completion_callback()]
        if not torch.cuda.is_available():
            from skillrise_gym.models import set_torch_threads

            set_torch_threads(config.threads)  # 0: by the cores and the load (models.auto_threads)
        model, tokenizer = load_model_and_tokenizer(config.model)
        peft_config = None
        if config.lora:
            from peft import LoraConfig

            peft_config = LoraConfig(
                r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0, target_modules="all-linear",
                task_type="CAUSAL_LM",
            )
        backend_options = dict(config.backend_options)
        prompt_style = resolve_prompt_style(config.prompt_style, model)
        rollout = RolloutEngine(
            config.env, config.algo, config.K, config.G, config.S,
            config.train_split or default_splits(config.env)[0], config.max_task_steps,
            success_reward=config.success_reward, seed=config.seed, workers=config.env_workers,
            env_timeout=config.env_timeout, envs=config.envs, ray_address=config.ray_address,
            ray_num_cpus=config.ray_num_cpus, ray_memory=config.ray_memory,
            overlap=config.overlap, overlap_wait=config.overlap_wait,
            backend_options=backend_options, generation_batch=config.generation_batch,
            rank=args.process_index, world_size=args.world_size, prompt_style=prompt_style,
        )
        try:
            return cls(config, model, tokenizer, rollout, args=args, peft_config=peft_config, callbacks=callbacks)
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
        from skillrise_gym.env import SequenceEnv
        from skillrise_train.warmstart import format_examples, warm_start

        c = self.config
        env = SequenceEnv(  # the run's own episodes (lamer: attempts with reflections)
            backend=c.env, split=self.rollout.split, max_task_steps=c.max_task_steps,
            backend_options=self.rollout.backend_options, prompt_style=self.rollout.prompt_style,
            **self.rollout.episode,
        )
        try:
            examples = format_examples(env, c.warmstart_sequences, seed=c.seed, reading=c.warmstart_reading,
                                       documents=c.warmstart_documents)
        finally:
            env.close()
        losses = warm_start(self.model, self.processing_class, self.encode_prompt, examples, c.warmstart_steps,
                            batch_size=c.warmstart_batch, lr=c.warmstart_lr, seed=c.seed)
        self.warmstart_losses = losses
        if c.algo == "skillrise":  # what it taught, on sequences it did not train on
            self.warmstart_check = self.check_warm_start()
        return losses

    def check_warm_start(self, sequences: int = 40) -> Any:
        """`warmstart.check_format` on training-split sequences the warm start's examples did not come from
        (greedy): the share of notes followed, of curate turns copying trajectory clauses, of well-formed
        answers; printed, and written to output_dir/warmstart.json."""
        from pathlib import Path

        from skillrise_gym.env import SequenceEnv
        from skillrise_train.warmstart import check_format, greedy_answerer

        c = self.config
        env = SequenceEnv(backend=c.env, K=self.rollout.K, split=self.rollout.split, max_task_steps=c.max_task_steps,
                          backend_options=self.rollout.backend_options, prompt_style=self.rollout.prompt_style)
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

        return encode_chat(self.processing_class, text, prefix, max_tokens=self.max_prompt_tokens,
                           template_kwargs=self.template_kwargs)

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
        return [
            Completion(list(p), list(c), pre + t, truncated, logps[n] if logps is not None else None)
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
        tags = [s.tag for s in result.samples]
        if self.config.algo == "lamer":
            returns, advantages = lamer_credit(
                tags, result.task_rewards, gamma=self.config.gamma, mode=self.config.advantage_mode,
                invalid_penalty=self.config.invalid_penalty,
            )
        elif self.config.algo == "gigpo":
            returns, advantages = gigpo_advantages(
                tags, result.task_rewards, step_gamma=self.config.step_gamma,
                step_weight=self.config.step_advantage_weight, mode=self.config.advantage_mode,
                invalid_penalty=self.config.invalid_penalty,
            )
        else:
            returns, advantages = assign_credit(
                tags, result.task_rewards, gamma=self.config.gamma, mode=self.config.advantage_mode,
                invalid_penalty=self.config.invalid_penalty, curate_credit=self.config.curate_credit,
            )
        self.last_rollout = result
        self.last_stats = rollout_stats(result, advantages, self.config.K)
        local_tags = [s.tag for s in local.samples]
        trained = trained_turns(local_tags, self.config.curate_credit)  # curate credit "none": solve turns only
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
        groups = self.pack_rows(inputs)
        if len(groups) == 1 and not self.ranks.several:
            return self.policy_loss(model, inputs)
        completion_mask = inputs["completion_mask"]
        rows_total = completion_mask.size(0)
        tokens_total = completion_mask.sum().clamp(min=1)
        # the entropy bonus is a token mean over every process's micro-step (DDP averages the processes'
        # gradients, so each process's share is weighted by its tokens against the mean process's)
        entropy_tokens = self.ranks.total(int(completion_mask.sum())) / self.ranks.world_size if self.ranks.several \
            else float(tokens_total)
        done = torch.zeros((), device=completion_mask.device)
        for number, rows in enumerate(groups):
            micro = {k: (v[rows] if isinstance(v, torch.Tensor) and v.dim() > 0 and v.size(0) == rows_total else v)
                     for k, v in inputs.items()}
            tokens = micro["completion_mask"].sum()
            if self.batch_token_normalised:
                weight = 1.0  # already normalised by the whole batch's token count
            elif self.sequence_mean_loss:  # per-sequence means (grpo, dr_grpo, luspo, sapo)
                weight = len(rows) / rows_total
            else:  # bnpo: a token mean over this micro-batch
                weight = float(tokens / tokens_total)
            # TRL's entropy bonus is a per-micro-batch token mean: reweight it to the whole batch's
            share = float(tokens) / max(1.0, entropy_tokens)
            with self.entropy_scale(share / weight if weight else 0.0):
                loss = self.policy_loss(model, micro) * weight
            if number < len(groups) - 1:
                self.accelerator.backward(loss)
                done = done + loss.detach()
        return loss + done

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
