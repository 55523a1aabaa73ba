"""skillrise-train: the SkillRise trainer on TRL (rollouts over SequenceEnvs -> credit -> TRL's clipped loss).

    skillrise-train --env webshop                 # a few steps on CPU with the embedded SmolLM2-135M
    skillrise-train --env webshop --algo grpo     # the baseline under the same flags

Modules, one line each:

- `config`: `TrainConfig`, every setting of a run with its help line (the CLI's flags are made from it).
- `algorithms`: SkillRise, GRPO, GiGPO and LaMer, one object each: the episode a trial plays, the step's
  trials, the credit rule, the turns that enter the loss, the settings it refuses.
- `credit`: returns and group-relative advantages (plain numpy).
- `rollout`: `RolloutEngine`, S sequences x G trials per step played on an env pool by the bench's player.
- `rollout_setup`: the splits a run trains and evaluates on, the pool's size, `TrainConfig` -> `RolloutConfig`.
- `samples`: what a rollout produces (completions, trials, turns with token ids) and its step statistics.
- `sampling`: batch-independent sampling, each prompt drawing from its own seeded RNG (Gumbel-max).
- `pacing`: `Progress`, the progress line of a long rollout.
- `trainer`: `SkillRiseTrainer`, TRL's `GRPOTrainer` fed with env rollouts.
- `trl_adapter`: every use of TRL's private API, in one place, for the TRL versions pyproject pins.
- `grpo_args`: a `TrainConfig` translated into TRL's `GRPOConfig`, and what `--trl-options` may set.
- `shared_prefix`: the update runs each prompt prefix that rows share once per step (gradients exact).
- `attention`: the update's masked attention on a CPU, in blocks that skip the keys a query cannot see.
- `lora`: LoRA adapters merged into the base weights while the policy generates, restored exactly after.
- `distributed`: what several training processes agree on (who plays what, collectives, barriers).
- `checkpoints`: complete checkpoints, run folders, and records trimmed to the checkpoint a run resumes.
- `evaluate`: held-out evaluation during training, as a bench run of the policy being trained.
- `warmstart`: the supervised warm start that teaches the answer format and reading a note.
- `report`: learning curves (`skillrise-train plot RUN`) and model cards (RUN/README.md).
- `cli`: the `skillrise-train` console script.

`import skillrise_train` loads no torch, transformers or TRL (only `config` and the plain modules it uses);
the modules that need them import them at the top (trainer, trl_adapter, grpo_args, sampling, shared_prefix,
attention, lora), and `cli` only when it trains.
"""

from skillrise_gym import __version__
from skillrise_train.config import TrainConfig

__all__ = ["TrainConfig", "__version__"]
