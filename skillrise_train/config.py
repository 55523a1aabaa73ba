"""`TrainConfig`: every knob of a training run, one docstring line per field; CLI flags map 1:1 to fields.

Defaults finish a few SkillRise steps on WebShop on a laptop CPU in a few minutes with the embedded
SmolLM2-135M-Instruct. Paper-scale values (reference, section 5) are given in docs/train.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from skillrise_gym.prompts import STYLES

ALGOS = ("skillrise", "grpo", "gigpo")
ADVANTAGE_MODES = ("mean_norm", "mean_std_norm")


@dataclass
class TrainConfig:
    """Configuration of `skillrise-train` (fields are CLI flags: `--max-new-tokens 64`)."""

    env: str = "webshop"
    """Benchmark backend: webshop, alfworld, scienceworld (or toy, the unit-test engine)."""
    algo: str = "skillrise"
    """skillrise (solve + curate, skill document), grpo (the baseline: independent tasks, no document) or gigpo (grpo's episodes, plus step-level advantages over repeated states)."""
    model: str = "smollm2"
    """Model: smollm2 (embedded default), tiny (test model), a local HF directory, or a cached Hub id."""
    K: int = 2
    """Tasks per sequence."""
    G: int = 2
    """Trials per sequence (the group size of the group-relative advantage)."""
    S: int = 1
    """Sequences per training step."""
    gamma: float = 0.6
    """Discount of later tasks' rewards in a curate turn's return."""
    curate_credit: str = "future"
    """Curate turns' return: future (SkillRise: later tasks' discounted rewards), own (its own task's reward: the coupled ablation) or none (not trained)."""
    step_gamma: float = 0.95
    """gigpo: discount of later steps' rewards in a step's return (verl-agent's default)."""
    step_advantage_weight: float = 1.0
    """gigpo: weight of the step-level advantage added to the episode-level one."""
    success_reward: float = 10.0
    """Reward of a solved task (the reference's binary 10/0)."""
    invalid_penalty: float = 0.5
    """Subtracted from a turn whose output lacks its <action>/<skill> tags (0 disables)."""
    advantage_mode: str = "mean_norm"
    """mean_norm (return minus group mean, the reference) or mean_std_norm (also divided by the std)."""
    lr: float = 1e-5
    """Learning rate (the reference uses 1e-6 for full fine-tuning of Qwen3-4B)."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip."""
    epsilon: float = 0.2
    """PPO clip range (both sides)."""
    dual_clip: float = 3.0
    """Upper bound of the ratio for negative advantages (dual clip; 0 disables)."""
    entropy_coef: float = 0.001
    """Entropy bonus coefficient."""
    loss_type: str = "dapo"
    """TRL loss aggregation; dapo = token mean over the whole batch, as the reference's token-mean."""
    max_task_steps: int = 3
    """Solve steps allowed per task."""
    max_new_tokens: int = 48
    """Longest completion of one model call (tokens)."""
    prompt_style: str = "auto"
    """Prompts: full (reason, then answer), compact (answer only, short), or auto (compact for models under 1B parameters, else the backend's)."""
    max_prompt_tokens: int = 0
    """Longest prompt (tokens); longer prompts lose their middle. 0: model context minus max_new_tokens."""
    temperature: float = 1.0
    """Sampling temperature of rollouts (and of evaluation)."""
    lora: bool = True
    """Train LoRA adapters instead of all weights."""
    lora_r: int = 8
    """LoRA rank."""
    lora_alpha: int = 16
    """LoRA alpha."""
    warmstart_steps: int = 0
    """Supervised steps before RL on targets that need no task's solution: the tags, a copied trajectory clause, the action a note names (see warmstart.py)."""
    warmstart_sequences: int = 64
    """Training sequences played by the format agent to collect warm-start examples."""
    warmstart_lr: float = 3e-3
    """Learning rate of the warm start (AdamW)."""
    steps: int = 2
    """Training steps: rollouts of S x G trials, each followed by updates_per_rollout optimizer steps."""
    updates_per_rollout: int = 1
    """Optimizer steps per rollout on disjoint mini-batches of its turns (PPO-style; the clip acts when > 1)."""
    grad_accum: int = 1
    """TRL micro-batches per optimizer step (rows are padded to a multiple of it); see micro_batch_tokens."""
    micro_batch_tokens: int = 1024
    """Most tokens (rows x padded length) per forward/backward pass; bounds memory (0: no limit)."""
    eval_interval: int = 0
    """Evaluate every this many steps on the held-out split (0: only at the end when eval_sequences > 0)."""
    eval_sequences: int = 0
    """Held-out sequences per evaluation (0 disables evaluation)."""
    train_split: str = ""
    """Split to train on ('' = the backend's training split)."""
    eval_split: str = ""
    """Held-out split for evaluation ('' = the backend's evaluation split)."""
    save_interval: int = 1
    """Save a checkpoint every this many steps."""
    output_dir: str = "runs/skillrise"
    """Where checkpoints, metrics.jsonl and turns.jsonl go."""
    resume: bool = False
    """Continue from the latest checkpoint in output_dir (step count, optimizer and RNG state)."""
    seed: int = 0
    """Seed of sequence draws, sampling and initialisation."""
    env_workers: int = 0
    """Worker processes for the envs (0: in this process)."""
    env_timeout: float = 600.0
    """With env workers: seconds a worker may take to answer one round; a worker that dies or exceeds it is replaced and its trials replayed (then dropped, logged)."""
    threads: int = 1
    """Torch CPU threads (one was never slower than two for small models)."""
    use_vllm: bool = False
    """Generate with vLLM (GPU only; colocated with training)."""
    vllm_gpu_memory_utilization: float = 0.3
    """GPU memory share of vLLM in colocate mode."""
    bf16: bool = False
    """Train in bfloat16 (GPUs)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (large models on GPUs)."""
    generation_batch: int = 64
    """Most prompts generated in one call (bounds generation memory)."""
    record_turns: bool = True
    """Write every turn (prompt, response, credit) to output_dir/turns.jsonl."""
    backend_options: str = ""
    """Backend constructor options as JSON, e.g. '{"num_products": 200}'."""

    def __post_init__(self) -> None:
        if self.algo not in ALGOS:
            raise ValueError(f"algo must be one of {ALGOS}, got {self.algo!r}")
        from skillrise_train.credit import CURATE_CREDITS

        if self.curate_credit not in CURATE_CREDITS:
            raise ValueError(f"curate_credit must be one of {CURATE_CREDITS}, got {self.curate_credit!r}")
        if self.prompt_style not in ("auto",) + STYLES:
            raise ValueError(f"prompt_style must be auto or one of {STYLES}, got {self.prompt_style!r}")
        if self.advantage_mode not in ADVANTAGE_MODES:
            raise ValueError(f"advantage_mode must be one of {ADVANTAGE_MODES}, got {self.advantage_mode!r}")
        for name in ("K", "G", "S", "steps", "updates_per_rollout", "max_task_steps", "max_new_tokens", "grad_accum",
                     "generation_batch"):
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
        if self.invalid_penalty < 0:
            raise ValueError("invalid_penalty must be >= 0")
        from skillrise_gym.backends import backend_class, check_options

        backend_class(self.env)  # an unknown name: ValueError listing the known ones
        check_options(self.env, self.parsed_backend_options())

    def parsed_backend_options(self) -> dict[str, Any]:
        """`backend_options` as a dict (ValueError for JSON that is not an object)."""
        if not self.backend_options.strip():
            return {}
        try:
            options = json.loads(self.backend_options)
        except json.JSONDecodeError as exc:
            raise ValueError(f"backend_options must be a JSON object, e.g. '{{\"num_products\": 200}}': "
                             f"{exc.msg} at character {exc.pos} of {self.backend_options!r}") from None
        if not isinstance(options, dict):
            raise ValueError(f"backend_options must be a JSON object, got {self.backend_options!r}")
        return options

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
