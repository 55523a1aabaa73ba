"""skillrise-train: the SkillRise trainer on TRL (rollouts over SequenceEnvs -> credit -> TRL's clipped loss).

    skillrise-train --env webshop                 # a few steps on CPU with the embedded SmolLM2-135M
    skillrise-train --env webshop --algo grpo     # the baseline under the same flags

Modules: config (TrainConfig), credit (returns and advantages), rollout (lockstep play over an EnvPool),
trainer (the GRPOTrainer subclass), cli (the console script). Heavy imports (torch, trl) happen in
`trainer` and `cli` only.
"""

from skillrise_train.config import TrainConfig

__all__ = ["TrainConfig"]
