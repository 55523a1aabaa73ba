"""SkillRise Gym: Gymnasium environments whose episodes span K related tasks with an evolving skill document.

    import gymnasium as gym
    import skillrise_gym  # registers SkillRise-ALFWorld-v0, SkillRise-WebShop-v0, SkillRise-ScienceWorld-v0

    env = gym.make("SkillRise-WebShop-v0", K=3, split="test", seed=0)

Importing is light: engines are loaded when an environment first resets.
"""

from skillrise_gym.registration import ENV_IDS, register_envs
from skillrise_gym.tasks import Task

__version__ = "0.1.0"

register_envs()


def __getattr__(name: str):
    # Lazy access to the heavier pieces, so `import skillrise_gym` does not import them.
    if name == "SequenceEnv":
        from skillrise_gym.env import SequenceEnv

        return SequenceEnv
    if name in ("SequenceSampler", "TaskSequence"):
        from skillrise_gym import sequences

        return getattr(sequences, name)
    raise AttributeError(f"module 'skillrise_gym' has no attribute {name!r}")


__all__ = ["ENV_IDS", "SequenceEnv", "SequenceSampler", "Task", "TaskSequence", "register_envs", "__version__"]
