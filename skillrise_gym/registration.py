"""Gymnasium ids, registered once at `import skillrise_gym` (one function, as MiniGrid does)."""

from __future__ import annotations

import gymnasium as gym

from skillrise_gym.benchmarks import env_ids

#: gym id -> backend name (the rows of `benchmarks.TABLE` that have an id)
ENV_IDS = env_ids()


def register_envs() -> None:
    """Register every SkillRise id; kwargs of `gym.make` go to `SequenceEnv` (K, split, mode, seed,
    max_task_steps, family, backend_options, ...)."""
    for env_id, backend in ENV_IDS.items():
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point="skillrise_gym.env:SequenceEnv",
            kwargs={"backend": backend},
            # SequenceEnv ends tasks and episodes itself; a TimeLimit would cut sequences mid-way.
            max_episode_steps=None,
            disable_env_checker=False,
        )
