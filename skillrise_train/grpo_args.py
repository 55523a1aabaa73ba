"""The translation of a `TrainConfig` into TRL's `GRPOConfig`: what the trainer fixes, what `--trl-options`
may set and what it refuses, the vLLM settings the trainer can run, and the prompt style a model gets. The
trainer (trainer.py) builds its arguments here; the CLI checks `--trl-options` here before touching the
output folder."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from skillrise_gym.backends.base import ConfigurationError
from skillrise_train.config import TRL_FIELDS, TrainConfig
from skillrise_train.trl_adapter import GRPOConfig


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
        raise ConfigurationError(f"trl_options {dict(config.trl_options)}: GRPOConfig refused them: "
                                 f"{_one_line(exc)}") from None
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
    "model_init_kwargs": "the trainer loads the model itself from --model, and TRL ignores model_init_kwargs for a "
                         "model it is given",
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
    types = {f.name: f.type for f in dataclass_fields(GRPOConfig)}
    for key, value in options.items():
        if not _fits(value, types[key]):
            raise ConfigurationError(f"trl_options: {key} must be {_type_name(types[key])}, got {value!r}")
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


def _fits(value: Any, annotation: Any) -> bool:
    """Whether a JSON value fits a GRPOConfig field's annotation (bool, int, float, str, None, dict, list[...],
    enums, Literal and unions of them); annotations of other kinds let anything through (GRPOConfig checks
    them, or the up-front construction in `check_grpo_config` does)."""
    import enum
    import types
    import typing

    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, member) for member in typing.get_args(annotation))
    if origin is typing.Literal:
        return value in typing.get_args(annotation)
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if annotation is dict or origin is dict:
        return isinstance(value, dict)
    if annotation is list or origin is list:
        items = typing.get_args(annotation)
        return isinstance(value, list) and (not items or all(_fits(item, items[0]) for item in value))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return value in {member.value for member in annotation}
    return True


def _type_name(annotation: Any) -> str:
    """A GRPOConfig field's annotation as a user reads it: "a number", "true or false", "a JSON object", ..."""
    import enum
    import types
    import typing

    names = {bool: "true or false", int: "a whole number", float: "a number", str: "a string",
             type(None): "null", dict: "a JSON object", list: "a list"}
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        parts = [_type_name(member) for member in typing.get_args(annotation)]
        return " or ".join(dict.fromkeys(parts))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in annotation)
    return names.get(origin or annotation, str(annotation))


#: trl_options that need a package TRL or transformers imports only once the trainer is built: (module, pip name)
OPTION_PACKAGES = {"use_liger_kernel": ("liger_kernel", "liger-kernel")}
#: optimizers transformers builds from the model itself (parameter groups by module): only their package is
#: checked up front
MODEL_BUILT_OPTIMIZERS = ("galore", "apollo", "lomo")
#: schedulers that take no lr_scheduler_kwargs (transformers.get_scheduler drops them silently)
SCHEDULERS_WITHOUT_KWARGS = ("constant", "constant_with_warmup")


def check_grpo_config(config: TrainConfig, processes: int = 1) -> None:
    """`--trl-options` that pass `check_trl_options` but would fail only once the trainer is built or its first
    step runs, refused now as one-line ConfigurationErrors (the CLI calls this before the output folder is
    touched): the GRPOConfig is constructed; DeepSpeed and FSDP need GPUs (and FSDP several processes); a
    package an option needs must be installed; lr_scheduler_kwargs must be a JSON object the scheduler
    takes; and the optimizer and scheduler are created, and stepped once, on a stand-in model, as the
    trainer would create them (an unknown optimizer, its missing package, Adam's betas, ...)."""
    import importlib.util

    options = dict(config.trl_options)
    if not options:
        return
    gpus = torch.cuda.is_available()
    for name in ("deepspeed", "fsdp", "fsdp_config"):
        if options.get(name) and not gpus:
            raise ConfigurationError(f"trl_options: {name} needs GPUs (DeepSpeed and FSDP run on GPUs) and this "
                                     "machine has none (several CPU processes train without it: docs/train.md, "
                                     "Several processes)")
    if options.get("fsdp") and processes < 2:
        raise ConfigurationError("trl_options: fsdp needs several processes (accelerate launch --num_processes N "
                                 "..., or torchrun); this is one")
    for name, (module, package) in OPTION_PACKAGES.items():
        if options.get(name) and importlib.util.find_spec(module) is None:
            raise ConfigurationError(f"trl_options: {name} needs the {package} package, which is not installed: "
                                     f"pip install {package}")
    try:
        args = make_grpo_config(config)
    except ConfigurationError as exc:
        raise ConfigurationError(_one_line(exc)) from None
    except Exception as exc:  # noqa: BLE001  (whatever transformers or TRL raise: one line, exit 2)
        raise ConfigurationError(f"trl_options {options}: GRPOConfig refused them: {_one_line(exc)}") from None
    kwargs = args.lr_scheduler_kwargs
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ConfigurationError(f"trl_options: lr_scheduler_kwargs must be a JSON object of the scheduler's keyword "
                                 f"arguments, got {kwargs!r}")
    scheduler = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    if kwargs and scheduler in SCHEDULERS_WITHOUT_KWARGS:
        raise ConfigurationError(f"trl_options: lr_scheduler_kwargs {kwargs} would be ignored: lr_scheduler_type "
                                 f"{scheduler!r} takes none (set lr_scheduler_type to the scheduler they are for)")
    _check_optimizer_and_scheduler(args)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _check_optimizer_and_scheduler(args: GRPOConfig) -> None:
    """Create the optimizer `args` asks for on a stand-in model on this process's device, step it once, and
    create and step the learning-rate scheduler, as transformers' Trainer does (create_optimizer,
    create_scheduler); a failure is a one-line ConfigurationError."""
    from accelerate import PartialState
    from transformers import Trainer
    from transformers.optimization import get_scheduler
    from transformers.trainer_optimizer import is_optimizer_factory

    optim = getattr(args.optim, "value", args.optim)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)).to(PartialState().device)
    try:
        optimizer_cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args, model)
    except ImportError as exc:
        raise ConfigurationError(f"trl_options: optim {optim!r}: {_one_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001
        if any(name in optim for name in MODEL_BUILT_OPTIMIZERS):
            return  # it needs the real model's modules; its package is there
        raise ConfigurationError(f"trl_options: optim {optim!r} cannot be created: {_one_line(exc)}") from None
    if any(name in optim for name in MODEL_BUILT_OPTIMIZERS) or is_optimizer_factory(optimizer_cls):
        return  # built from the real model's modules
    try:
        groups = [{"params": [model[0].weight], "weight_decay": args.weight_decay},
                  {"params": [model[0].bias, *model[1].parameters()], "weight_decay": 0.0}]
        kwargs = dict(kwargs)
        kwargs.pop("params", None)
        optimizer = optimizer_cls(groups, **kwargs)
        model(torch.ones(2, 4, device=model[0].weight.device)).square().sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    except Exception as exc:  # noqa: BLE001
        raise ConfigurationError(f"trl_options: the optimizer (optim {optim!r}, adam_beta1/adam_beta2/adam_epsilon, "
                                 f"optim_args) cannot be created: {_one_line(exc)}") from None
    scheduler = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    try:
        steps = max(1, int(args.max_steps))
        schedule = get_scheduler(scheduler, optimizer=optimizer, num_warmup_steps=args.get_warmup_steps(steps),
                                 num_training_steps=steps, scheduler_specific_kwargs=args.lr_scheduler_kwargs)
        optimizer.step()
        schedule.step()
    except Exception as exc:  # noqa: BLE001
        raise ConfigurationError(f"trl_options: lr_scheduler_type {scheduler!r} with lr_scheduler_kwargs "
                                 f"{args.lr_scheduler_kwargs}: {_one_line(exc)}") from None


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
