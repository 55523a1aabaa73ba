"""skillrise-train: the SkillRise trainer on TRL (rollouts over SequenceEnvs -> credit -> TRL's clipped loss).

    skillrise-train --env webshop                 # a few steps on CPU with the embedded SmolLM2-135M
    skillrise-train --env webshop --algo grpo     # the baseline under the same flags

Modules: config (TrainConfig), algorithms (SkillRise, GRPO, GiGPO, LaMer: each one's episode, plan and
credit rule), credit (returns and advantages), rollout and rollout_setup (play over an env pool), samples
(rollout records and statistics), trainer (the GRPOTrainer subclass), trl_adapter and grpo_args (what TRL
is given), evaluate (held-out evaluation through the bench), warmstart (the format warm start), checkpoints
(run folders, resume), distributed and sampling and shared_prefix and attention and lora (several
processes, generation, prefix sharing, LoRA), pacing (progress), report (learning curves and model cards),
cli (the console script). Heavy imports (torch, trl) happen in `trainer` and `cli` only.
"""

from skillrise_gym import __version__
from skillrise_train.config import TrainConfig

__all__ = ["TrainConfig", "__version__"]
