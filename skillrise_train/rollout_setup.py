"""Setting up a rollout: which splits a run trains and evaluates on, how many envs serve a step, and the one
place a `TrainConfig` becomes a `RolloutConfig` (what the rollout engine takes)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from skillrise_gym.backends import backend_class
from skillrise_gym.episode import EpisodeSpec
from skillrise_gym.pools import PoolConfig
from skillrise_gym.resources import available_memory  # shared with the bench, which bounds its JVMs alike
from skillrise_train.algorithms import algorithm, algorithm_for
from skillrise_train.config import OVERLAP_WAIT


@dataclass(frozen=True)
class RolloutConfig:
    """What a `RolloutEngine` plays: S sequences x G trials per step of `algo`'s episodes (K tasks each) of
    the `env` backend's `split`, on a pool of `envs` envs (0: sized by `pool_size`).

    `episode`: the episode every trial plays (`training_episode`: what the trainer made once and saves with
    its checkpoints); without it, the one `algo` plays with the loose fields env, split, max_task_steps,
    backend_options and prompt_style (a shorthand for tests and benchmarks). `spec` is the one in use."""

    env: str
    algo: str = "skillrise"
    K: int = 2
    G: int = 2
    S: int = 1
    split: str = "train"
    max_task_steps: int | None = None
    success_reward: float = 10.0
    seed: int = 0
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    prompt_style: str | None = None
    generation_batch: int = 64  # most prompts in one generation call
    envs: int = 0
    pool: PoolConfig = field(default_factory=PoolConfig)  # env workers, their timeout, Ray
    overlap: bool = False  # trials go on as their envs answer (rollout.py, "Overlap")
    overlap_wait: float = OVERLAP_WAIT
    max_attempts: int = 2  # plays of a trial whose env worker died or hung, before it is dropped
    episode: EpisodeSpec | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.overlap_wait) and self.overlap_wait >= 0):
            raise ValueError(f"overlap_wait must be a number of seconds >= 0, got {self.overlap_wait!r}")
        if self.episode is not None and self.episode.env != self.env:
            raise ValueError(f"episode is of {self.episode.env}, the rollout of {self.env}")

    @property
    def spec(self) -> EpisodeSpec:
        """The episode every trial plays."""
        if self.episode is not None:
            return self.episode
        return EpisodeSpec.resolve(self.env, split=self.split, max_task_steps=self.max_task_steps,
                                   prompt_style=self.prompt_style, backend_options=self.backend_options,
                                   **algorithm(self.algo).episode(self.K))

    @classmethod
    def from_train(cls, config: Any, episode: EpisodeSpec) -> "RolloutConfig":
        """The rollout settings of a `TrainConfig` playing `episode` (`training_episode`)."""
        return cls(env=config.env, algo=config.algo, K=config.K, G=config.G, S=config.S, split=episode.split,
                   max_task_steps=episode.max_task_steps, success_reward=config.success_reward, seed=config.seed,
                   backend_options=dict(episode.backend_options), prompt_style=episode.prompt_style,
                   generation_batch=config.generation_batch, envs=config.envs, pool=pool_config(config),
                   overlap=config.overlap, overlap_wait=config.overlap_wait, episode=episode)


def training_episode(config: Any, prompt_style: str | None, split: str | None = None, **framing: Any) -> EpisodeSpec:
    """The episode a `TrainConfig` trains on, made once: its algorithm's (`Algorithm.episode`: K tasks of a
    family, one task, K attempts with reflections), on `split` (default: its training split), with the prompt
    style resolved for its model (`grpo_args.resolve_prompt_style`; None: the backend's) and every other
    default resolved; `framing`: how each call is framed (max_new_tokens, max_prompt_tokens, system_prompt,
    chat_template_kwargs)."""
    return EpisodeSpec.resolve(config.env, split=split or config.train_split or default_splits(config.env)[0],
                               max_task_steps=config.max_task_steps, prompt_style=prompt_style,
                               backend_options=dict(config.backend_options),
                               **algorithm_for(config).episode(config.K), **framing)


def pool_config(config: Any) -> PoolConfig:
    """The env pool settings of a `TrainConfig` (env workers, their timeout, Ray), shared by its rollouts and
    its evaluations. The timeout applies where an env runs in a worker or an actor."""
    return PoolConfig(workers=config.env_workers,
                      timeout=config.env_timeout if config.env_workers or config.ray_address else None,
                      ray_address=config.ray_address, ray_num_cpus=config.ray_num_cpus, ray_memory=config.ray_memory)


HELD_OUT_SPLITS = ("eval_in_distribution", "test", "eval", "dev")


def default_splits(env: str) -> tuple[str, str]:
    """(train split, held-out split) of a backend: "train", and the reference's evaluation split
    (ALFWorld eval_in_distribution, WebShop test = goals 0-499, ScienceWorld test)."""
    splits = backend_class(env).splits
    train = "train" if "train" in splits else splits[0]
    held_out = next((s for s in HELD_OUT_SPLITS if s in splits and s != train), None)
    return train, held_out or next((s for s in splits if s != train), train)


def pool_size(envs: int, trials: int, env: str) -> int:
    """How many envs serve a step of `trials` trials: `envs`, or with 0 as many as the memory holds: one per
    trial, except for a backend whose envs hold memory of their own (`Backend.env_memory`: ScienceWorld's
    JVMs), no more than the available memory holds; never more than the trials. CPUs do not bound it:
    envs step one at a time in a process anyway (`env_workers` decides the parallelism), and fewer envs
    than trials means smaller generation batches, the dominant cost."""
    if envs < 0:
        raise ValueError(f"envs must be >= 0 (0 sizes the env pool to the memory), got {envs}")
    if envs:
        return min(envs, trials)
    size = trials
    per_env = backend_class(env).env_memory
    available = available_memory()
    if per_env and available is not None:
        size = min(size, available // per_env)
    return max(1, size)
