"""`TrainConfig`: every knob of a training run, one help line per field; the CLI is generated from it by
`skillrise_gym.cli_fields` (the bench's and the experiment presets' way too: flags ``--max-new-tokens 64``,
booleans ``--lora`` / ``--no-lora``).

Defaults finish a few SkillRise steps on WebShop on a laptop CPU in a few minutes with the embedded
SmolLM2-135M-Instruct. Paper-scale values (reference, section 5) are given in docs/train.md.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from skillrise_gym.cli_fields import option  # noqa: F401  (re-exported: the one field-with-flag helper)
from skillrise_gym.prompts import STYLES
from skillrise_gym.models import DTYPES
from skillrise_gym.player import OVERLAP_WAIT  # noqa: F401  (overlapped play's default wait: the player's own)
from skillrise_train.algorithms import ALGORITHMS, algorithm_for

#: TrainConfig fields that are GRPOConfig fields, and the GRPOConfig field each sets: the whole mapping
#: (`grpo_args.make_grpo_config` applies it; tests/test_trl_contract.py checks both sides exist). Our defaults
#: differ from TRL's where small CPU runs need it (lr 1e-5, weight_decay 0.01, dual_clip 3, entropy_coef 0.001,
#: max_new_tokens 48, gradient_checkpointing off); any other GRPOConfig field goes through `trl_options`.
TRL_FIELDS = {
    "lr": "learning_rate",
    "weight_decay": "weight_decay",
    "max_grad_norm": "max_grad_norm",
    "epsilon": "epsilon",
    "dual_clip": "delta",
    "entropy_coef": "entropy_coef",
    "loss_type": "loss_type",
    "max_new_tokens": "max_completion_length",
    "temperature": "temperature",
    "grad_accum": "gradient_accumulation_steps",
    "use_vllm": "use_vllm",
    "vllm_gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "bf16": "bf16",
    "gradient_checkpointing": "gradient_checkpointing",
}


class JSONObject(dict):
    """A dict that can also be built from a JSON object's text: ``--backend-options '{"num_products": 200}'``
    on the command line, a plain dict from Python; anything else is a clear error naming `field_name`."""

    field_name = "backend_options"
    example = '{"num_products": 200}'

    def __init__(self, value: Any = (), **kwargs: Any) -> None:
        if isinstance(value, str):
            value = self.parse(value)
        elif isinstance(value, (int, float, bool)) or value is None:
            raise argparse.ArgumentTypeError(f"{self.field_name} must be a JSON object or a dict, got {value!r}")
        super().__init__(value, **kwargs)

    @classmethod
    def parse(cls, text: str) -> dict[str, Any]:
        """The JSON object `text` holds; a key given twice at any depth is an error (JSON would silently keep
        the last value)."""
        if not text.strip():
            return {}

        def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
            seen: dict[str, Any] = {}
            for key, item in pairs:
                if key in seen:
                    raise argparse.ArgumentTypeError(f"{cls.field_name} names {key!r} twice in {text!r}; give it once")
                seen[key] = item
            return seen

        try:
            value = json.loads(text, object_pairs_hook=unique)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"{cls.field_name} must be a JSON object, e.g. '{cls.example}': "
                                             f"{exc.msg} at character {exc.pos} of {text!r}") from None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"{cls.field_name} must be a JSON object, got {text!r}")
        return value


class TRLOptions(JSONObject):
    """`trl_options`: GRPOConfig fields by TRL's names (checked against GRPOConfig when the trainer is built)."""

    field_name = "trl_options"
    example = '{"lr_scheduler_type": "cosine"}'


#: TRL's loss aggregations (GRPOConfig's loss_type help; tests/test_reliability_train_config.py checks the pinned
#: TRL's list)
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
#: the largest --seed: evaluation and the samplers add offsets to it, and numpy takes seeds below 2**32
SEED_LIMIT = 2**31 - 1
#: a key whose value is a secret (GRPOConfig's hub_token; a token, key or password at any depth of trl_options)
SECRET_KEY = re.compile(r"(^|_)(token|key|password|passwd|secret|credentials?)$|password|secret|api_?key", re.I)
#: what config.json holds in place of a secret
REDACTED = "<redacted>"


def redact_secrets(value: Any) -> Any:
    """`value` (a dict, at any depth) with every non-empty string under a secret-like key (`SECRET_KEY`)
    replaced by `REDACTED`: what may be written to disk."""
    if isinstance(value, dict):
        return {key: REDACTED if (isinstance(item, str) and item and SECRET_KEY.search(str(key)))
                else redact_secrets(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_secrets(item) for item in value]
    return value


ALGOS = tuple(ALGORITHMS)  # skillrise_train.algorithms: one object per algorithm
ADVANTAGE_MODES = ("mean_norm", "mean_std_norm")
GENERATION_DTYPES = DTYPES  # skillrise_gym.models: the dtypes a model is loaded or copied in


@dataclass
class TrainConfig:
    """Configuration of `skillrise-train` (fields are CLI flags: `--max-new-tokens 64`)."""

    env: str = option("webshop", 'Benchmark backend: webshop, alfworld, scienceworld, rulebook (the transfer probe) or toy (the unit-test engine).')
    algo: str = option("skillrise", ", ".join(a.help for a in ALGORITHMS.values()) + "; algorithms.py.")
    model: str = option("smollm2", 'Model: smollm2 (embedded default), tiny (test model), a local HF directory, or a cached Hub id.')
    K: int = option(2, 'Tasks per sequence.')
    G: int = option(2, 'Trials per sequence (the group size of the group-relative advantage; at least 2).')
    S: int = option(1, 'Sequences per training step.')
    gamma: float = option(0.6, "Discount of later tasks' rewards in a curate turn's return.")
    curate_credit: str = option("future", "Curate turns' return: future (SkillRise: later tasks' discounted rewards), own (its own task's reward: the coupled ablation) or none (not trained).")
    step_gamma: float = option(0.95, "gigpo: discount of later steps' rewards in a step's return (verl-agent's default).")
    step_advantage_weight: float = option(1.0, 'gigpo: weight of the step-level advantage added to the episode-level one.')
    success_reward: float = option(10.0, "Reward of a solved task (the reference's binary 10/0).")
    invalid_penalty: float = option(0.5, 'Subtracted from a turn whose output lacks its <action>/<skill> tags (0 disables).')
    repetition_penalty: float = option(0.0, "Subtracted from the advantage of a curate turn whose document states one clause twice (the document regrowth seen at R=2: a clause repeated until the token budget cuts it). 0 (the default) disables it; a change of method, not SkillRise's own credit. The share is logged as repeats/curate either way.")
    overlong_penalty: float = option(0.0, "Subtracted from the advantage of a turn whose completion ran to --max-new-tokens without ending (cut off mid-answer; DAPO's overlong punishment as a constant). 0 (the default) disables it; the share cut is logged as cut/solve and cut/curate either way.")
    advantage_mode: str = option("mean_norm", 'mean_norm (return minus group mean, the reference) or mean_std_norm (also divided by the std).')
    lr: float = option(1e-5, 'Learning rate (the reference uses 1e-6 for full fine-tuning of Qwen3-4B).')
    weight_decay: float = option(0.01, 'AdamW weight decay.')
    max_grad_norm: float = option(1.0, 'Gradient-norm clip.')
    epsilon: float = option(0.2, 'PPO clip range (both sides).')
    dual_clip: float = option(3.0, 'Upper bound of the ratio for negative advantages (dual clip; 0 disables).')
    entropy_coef: float = option(0.001, 'Entropy bonus coefficient.')
    loss_type: str = option("dapo", "TRL loss aggregation; dapo = token mean over the whole batch, as the reference's token-mean.")
    max_task_steps: int | None = option(None, "Solve steps allowed per task (unset: the backend's own limit, as skillrise-bench: ALFWorld 30, WebShop 15, ScienceWorld 30).")
    max_new_tokens: int = option(48, 'Longest completion of one model call (tokens).')
    prompt_style: str = option("auto", "Prompts: full (reason, then answer), compact (answer only, short), or auto (compact for models under 1B parameters, else the backend's).")
    system_prompt: str | None = option(None, "A system message before every prompt (unset: none, and the chat template may add its own, as SmolLM2's does; '' sends an empty one, which stops that). Saved with the episode, so the bench frames prompts the same way.")
    max_prompt_tokens: int = option(0, 'Longest prompt (tokens); longer prompts lose their middle. 0: model context minus max_new_tokens.')
    temperature: float = option(1.0, 'Sampling temperature of rollouts (and of evaluation).')
    lora: bool = option(True, 'Train LoRA adapters instead of all weights.')
    lora_r: int = option(8, 'LoRA rank.')
    lora_alpha: int = option(16, 'LoRA alpha.')
    save_merged: bool = option(False, "With --lora: also save the adapter merged into its base as full weights in output_dir/final-merged/ (loads without peft; final/ keeps the adapter).")
    warmstart_steps: int = option(0, "Supervised steps before RL on targets that need no task's solution: the tags, a copied trajectory clause, the action a note names (see warmstart.py).")
    warmstart_sequences: int = option(64, 'Training sequences played by the format agent to collect warm-start examples.')
    warmstart_documents: str = option("one", "Warm-start documents: one (curate targets one trajectory clause) or several (keep the previous document and add a clause; read the rule about the item: probes of several rules per family).")
    warmstart_reading: int = option(2, "Reading examples per warm-start sequence (a note from other tasks' clauses as the first task's document; with --warmstart-documents several, half of them hold several rules, one about the item).")
    warmstart_lr: float = option(3e-3, 'Learning rate of the warm start (AdamW).')
    warmstart_batch: int = option(32, 'Examples per warm-start step.')
    steps: int = option(2, 'Training steps: rollouts of S x G trials, each followed by updates_per_rollout optimizer steps.')
    updates_per_rollout: int = option(1, 'Optimizer steps per rollout on disjoint mini-batches of its turns (PPO-style; the clip acts when > 1).')
    grad_accum: int = option(1, 'TRL micro-batches per optimizer step (rows are padded to a multiple of it); see micro_batch_tokens.')
    micro_batch_tokens: int = option(-1, 'Most tokens (rows x padded length) per forward/backward pass; bounds memory. -1: 1024 on a CPU, on a GPU sized from its memory and the model (docs/train.md); 0: no limit.')
    eval_interval: int = option(0, 'Evaluate every this many steps on the held-out split (0: only at the end when eval_sequences > 0).')
    eval_sequences: int = option(0, 'Held-out sequences per evaluation (0 disables evaluation).')
    train_split: str | None = option(None, "Split to train on (unset: the backend's training split).")
    eval_split: str | None = option(None, "Held-out split for evaluation (unset: the backend's evaluation split).")
    save_interval: int = option(1, 'Save a checkpoint every this many steps (1: a kill loses at most the step in flight, and --resume continues exactly; with a large full-weight model, save less often, or keep the last few with --trl-options \'{"save_total_limit": 2}\').')
    output_dir: str = option("runs/skillrise", 'Where checkpoints, metrics.jsonl and turns.jsonl go.')
    resume: bool = option(False, 'Continue from the latest checkpoint in output_dir (step count, optimizer and RNG state).')
    overwrite: bool = option(False, "Start over in an output_dir that holds a run: delete its records, checkpoints and final model first (without it, such a folder needs --resume).")
    seed: int = option(0, 'Seed of sequence draws, sampling and initialisation.')
    envs: int = option(0, "Envs that play a step's trials, each taking the next trial when its own ends (memory follows this, not S x G). 0: one per trial; for ScienceWorld, as many JVMs as the memory holds (docs/train.md).")
    env_workers: int = option(0, 'Worker processes for the envs (0: in this process).')
    env_timeout: float = option(600.0, 'With env workers (or on Ray): seconds a worker (an actor) may take to answer one round; one that dies or exceeds it is replaced and its trials replayed (then dropped, logged).')
    ray_address: str | None = option(None, "Run each env in a Ray actor: local (a Ray instance here) or a cluster's address (host:port, ray://host:10001, auto); unset: no Ray. Needs pip install 'skillrise-gym[ray]'.")
    ray_num_cpus: float | None = option(None, "With ray_address: CPUs reserved per env (unset: none held while it runs, as for any Ray actor).")
    ray_memory: float | None = option(None, 'With ray_address: memory reserved per env in bytes, e.g. 1.5e9 for a ScienceWorld JVM.')
    overlap: bool = option(False, "Step envs while the model generates for other trials, instead of in rounds (needs env_workers or ray_address); the same turns as rounds (docs/train.md).")
    overlap_wait: float = option(OVERLAP_WAIT, 'With overlap: the longest a trial waits for busy envs to join its generation call, in seconds (>= 0; it waits only while they are expected sooner than a call costs).')
    threads: int = option(0, "Torch CPU threads (CPU runs); 0: the cores that other work leaves free by the 1-minute load average, shared among this machine's training processes (skillrise_gym.models.auto_threads).")
    use_vllm: bool = option(False, 'Generate with vLLM (GPU only; colocated with training).')
    vllm_gpu_memory_utilization: float = option(0.3, 'GPU memory share of vLLM in colocate mode.')
    bf16: bool = option(False, 'Autocast the update to bfloat16, on GPUs and CPUs (faster on a CPU with bf16 units: docs/train.md, CPU generation).')
    generation_dtype: str | None = option(None, "Generate with a copy of the policy in this dtype (bfloat16, float16, float32); its log-probs of the sampled tokens are the old policy's (docs/train.md, CPU generation). Not with --use-vllm.")
    prefix_cache_mb: int = option(1024, "Keep up to this many MB of prompt keys/values during a rollout, so a turn whose prompt starts like an earlier one prefills only the rest (HF generate; docs/train.md, CPU generation); 0: off.")
    share_prefixes: bool = option(True, "In the update, run each prompt prefix that several rows of a step share once (the rows' own tokens run on its keys and values; same loss and gradients; one process only; docs/train.md, Shared prefixes in the update).")
    gradient_checkpointing: bool = option(False, 'Recompute activations in the backward pass: bounds update memory by the longest row (docs/train.md).')
    generation_batch: int = option(64, 'Most prompts generated in one call (bounds generation memory).')
    record_turns: bool = option(True, 'Write every turn (prompt, response, credit) to output_dir/turns.jsonl.')
    progress: bool = option(True, "No progress line within a rollout (on a terminal it is rewritten after every generation round; in a log, one line every 30 s).", flag="--no-progress")
    report_to: list[str] = option(["none"], "Experiment trackers that get the run's settings as hyperparameters and its training and held-out evaluation metrics on one step axis: tensorboard (event files in output_dir/tensorboard/), wandb (offline unless WANDB_MODE says otherwise), trackio (its local store), or none (skillrise_gym/tracking.py).", choices=["none", "tensorboard", "wandb", "trackio"])
    backend_options: JSONObject = option(JSONObject(), 'Backend constructor options, a dict (on the command line as JSON, e.g. \'{"num_products": 200}\').')
    trl_options: TRLOptions = option(TRLOptions(), 'Any other GRPOConfig field, a dict (JSON on the command line, e.g. \'{"lr_scheduler_type": "cosine", "warmup_steps": 10}\'); fields this config or the trainer sets are refused.')

    def __post_init__(self) -> None:
        if self.resume and self.overwrite:
            raise ValueError("resume and overwrite contradict each other: --resume continues the run in output_dir, "
                             "--overwrite deletes it; give one")
        algorithm = algorithm_for(self)  # an unknown name: ValueError listing the known ones
        from skillrise_train.credit import CURATE_CREDITS

        if self.curate_credit not in CURATE_CREDITS:
            raise ValueError(f"curate_credit must be one of {CURATE_CREDITS}, got {self.curate_credit!r}")
        algorithm.check(self)
        if self.prompt_style not in ("auto",) + STYLES:
            raise ValueError(f"prompt_style must be auto or one of {STYLES}, got {self.prompt_style!r}")
        if self.warmstart_batch < 1:
            raise ValueError(f"warmstart_batch must be >= 1, got {self.warmstart_batch}")
        if self.warmstart_reading < 0:
            raise ValueError(f"warmstart_reading must be >= 0, got {self.warmstart_reading}")
        if self.warmstart_documents not in ("one", "several"):
            raise ValueError(f"warmstart_documents must be one or several, got {self.warmstart_documents!r}")
        if self.advantage_mode not in ADVANTAGE_MODES:
            raise ValueError(f"advantage_mode must be one of {ADVANTAGE_MODES}, got {self.advantage_mode!r}")
        try:
            self.backend_options = JSONObject(self.backend_options)
            self.trl_options = TRLOptions(self.trl_options)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(str(exc)) from None
        for name in ("K", "G", "S", "steps", "updates_per_rollout", "max_task_steps", "max_new_tokens", "grad_accum",
                     "generation_batch"):
            if name == "max_task_steps" and self.max_task_steps is None:
                continue
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("lr", "warmstart_lr", "env_timeout"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        for name in ("lr", "warmstart_lr"):  # AdamW moves each weight by about lr per step
            if getattr(self, name) > 1.0:
                raise ValueError(f"{name} must be at most 1 (AdamW moves every weight by about lr per step; "
                                 f"1e-6 to 1e-3 is usual), got {getattr(self, name)!r}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 <= self.step_gamma <= 1.0:
            raise ValueError(f"step_gamma must be in [0, 1], got {self.step_gamma}")
        if not (math.isfinite(self.step_advantage_weight) and self.step_advantage_weight >= 0):
            raise ValueError(f"step_advantage_weight must be a finite number >= 0, got {self.step_advantage_weight}")
        trackers = [self.report_to] if isinstance(self.report_to, str) else list(self.report_to or ["none"])
        unknown = [t for t in trackers if t not in ("none", "tensorboard", "wandb", "trackio")]
        if unknown:
            raise ValueError(f"report_to: unknown tracker {unknown[0]!r}; choose from none, tensorboard, wandb, trackio")
        if "none" in trackers and len(trackers) > 1:
            raise ValueError("report_to: none with other trackers; give the trackers, or none alone")
        self.report_to = list(dict.fromkeys(trackers))
        for name, value in (("invalid_penalty", self.invalid_penalty), ("overlong_penalty", self.overlong_penalty),
                            ("repetition_penalty", self.repetition_penalty)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        if self.generation_dtype is not None:
            if self.generation_dtype not in GENERATION_DTYPES:
                raise ValueError(f"generation_dtype must be one of {GENERATION_DTYPES} (or unset), got "
                                 f"{self.generation_dtype!r}")
            if self.use_vllm:
                raise ValueError("generation_dtype is for HF generate; vLLM generates in the dtype it loads the "
                                 "model in: drop one of --generation-dtype, --use-vllm")
        if not isinstance(self.prefix_cache_mb, int) or self.prefix_cache_mb < 0:
            raise ValueError(f"prefix_cache_mb must be an integer >= 0 (0: off), got {self.prefix_cache_mb!r}")
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0 (0: chosen from the cores and the load), got {self.threads}")
        if self.envs < 0:
            raise ValueError(f"envs must be >= 0 (0 sizes the env pool to the memory), got {self.envs}")
        if not (isinstance(self.overlap_wait, (int, float)) and math.isfinite(self.overlap_wait)
                and self.overlap_wait >= 0):
            raise ValueError(f"overlap_wait must be a number of seconds >= 0, got {self.overlap_wait!r}")
        from skillrise_gym.pools.ray import check_settings

        check_settings(self.ray_address, self.ray_num_cpus, self.ray_memory)
        self._check_ranges()
        from skillrise_gym.backends import backend_class, check_options

        backend = backend_class(self.env)  # an unknown name: ValueError listing the known ones
        check_options(self.env, self.backend_options)
        # a misspelt split now, not after a training step; an alias (ALFWorld's valid_seen) by its name here
        self.train_split = backend.canonical_split(self.train_split) if self.train_split is not None else None
        self.eval_split = backend.canonical_split(self.eval_split) if self.eval_split is not None else None

    def _check_ranges(self) -> None:
        """The numbers the other checks leave: each a one-line ValueError naming the field, before anything
        runs (they used to pass and then crash, or train meaninglessly)."""
        def number(name: str, low: float, *, above: bool = False, high: float | None = None,
                   whole: bool = False, hint: str = "") -> None:
            value = getattr(self, name)
            ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
                  and (isinstance(value, int) or not whole) and math.isfinite(value)
                  and (value > low if above else value >= low) and (high is None or value <= high))
            if not ok:
                bound = (f"> {low}" if above else f">= {low}") + (f" and <= {high}" if high is not None else "")
                raise ValueError(f"{name} must be a {'whole' if whole else 'finite'} number {bound}{hint}, "
                                 f"got {value!r}")

        number("seed", 0, high=SEED_LIMIT, whole=True)
        number("eval_sequences", 0, whole=True, hint=" (0: no evaluation)")
        number("eval_interval", 0, whole=True, hint=" (0: only at the end)")
        number("save_interval", 1, whole=True, hint=" (steps between checkpoints)")
        number("lora_r", 1, whole=True)
        number("lora_alpha", 0, above=True)
        number("temperature", 0, hint=" (0: greedy)")
        number("max_prompt_tokens", 0, whole=True, hint=" (0: the model's context minus max_new_tokens)")
        number("warmstart_steps", 0, whole=True, hint=" (0: no warm start)")
        number("warmstart_sequences", 1 if self.warmstart_steps else 0, whole=True,
               hint=" (with warmstart_steps, the sequences its examples come from)" if self.warmstart_steps else "")
        number("weight_decay", 0)
        number("max_grad_norm", 0, hint=" (0: no clipping)")
        number("epsilon", 0, above=True, hint=" (the PPO clip range)")
        if not (isinstance(self.dual_clip, (int, float)) and (self.dual_clip == 0 or
                                                            (math.isfinite(self.dual_clip) and self.dual_clip > 1))):
            raise ValueError(f"dual_clip must be 0 (off) or a finite bound > 1 on the ratio, got {self.dual_clip!r}")
        if not (isinstance(self.entropy_coef, (int, float)) and math.isfinite(self.entropy_coef)):
            raise ValueError(f"entropy_coef must be a finite number, got {self.entropy_coef!r}")
        number("success_reward", 0, above=True)
        number("micro_batch_tokens", -1, whole=True, hint=" (-1: sized for the device; 0: no limit)")
        number("env_workers", 0, whole=True, hint=" (0: envs in this process)")
        number("vllm_gpu_memory_utilization", 0, above=True, high=1)
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)} (TRL's), got {self.loss_type!r}")
        if not str(self.output_dir).strip():
            raise ValueError("output_dir must name a folder, got ''")

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data, for config.json: secrets in trl_options (hub_token, ...) redacted
        (`redact_secrets`; the trainer still gives them to TRL)."""
        return {**asdict(self), "backend_options": dict(self.backend_options),
                "trl_options": redact_secrets(dict(self.trl_options))}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
