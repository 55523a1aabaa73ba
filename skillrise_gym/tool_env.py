"""SkillRise sequence envs as TRL environments: `GRPOTrainer(environment_factory=environment_factory(ENV_ID))`.

TRL's GRPOTrainer (>= 1.16) plays multi-turn environments through tool calls: it makes one environment per
rollout from a zero-argument factory, calls its `reset()` (whose string is appended to the prompt), exposes
its public methods as tools the model calls during generation, and scores the whole rollout with its
`get_reward()`. `ToolEnvironment` is that shape around any SkillRise env id:

    reset(seed=None, **row) starts a sequence of K tasks (the one the row's `seed` draws: give the dataset a
                            seed column so the G generations of a prompt play one sequence, as GRPO's groups
                            need); returns the first SOLVE prompt and how to answer with the tools
    act(command)            one engine command in the current task (a SOLVE step); returns what follows:
                            the next SOLVE prompt, or, when the task ended, the CURATE prompt
    write_skills(document)  the CURATE step: the document the next task will see; returns the next task's
                            prompt, or that the sequence is over
    get_reward()            the tasks solved in the sequence (TRL's one reward per rollout)

What stock GRPO cannot express (why skillrise-train exists): TRL gives every token of a rollout the same
advantage, from one reward per rollout, grouped per prompt. SkillRise credits each turn separately: a solve
turn with its own task's reward, a curate turn with the discounted sum of the LATER tasks' rewards, and
normalises advantages per (task position, role) across the G trials of a sequence. Through this adapter, a
document that helps only later tasks is rewarded exactly as much as the solve turns around it, and a curate
turn is not told apart from a solve turn. Use it to plug the envs into stock GRPO (a baseline, or a
researcher's own TRL setup); use `skillrise-train` for the method.

The model must call tools: its chat template must render tool calls (TRL refuses one that cannot; SmolLM2's
and the embedded tiny model's do not, Qwen3's does). examples/trl_environment_factory.py trains one step of
stock GRPO on the rulebook probe this way with a tiny offline model.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

#: what the model is told after each prompt, so that it answers with the tools
SOLVE_HOW = "Answer by calling the act tool with one command."
CURATE_HOW = "The task has ended. Call the write_skills tool with the full revised skill document."


class ToolEnvironment:
    """One SkillRise sequence env as a TRL environment (see the module docstring). `env_id`: a registered
    SkillRise id; `make_kwargs`: `gym.make` keyword arguments (K, split, backend_options...); `seed`: the
    first reset's seed (each reset takes the next)."""

    def __init__(self, env_id: str = "SkillRise-Rulebook-v0", seed: int = 0, **make_kwargs: Any) -> None:
        import gymnasium as gym

        import skillrise_gym  # noqa: F401  (registers the ids)

        self.env = gym.make(env_id, **make_kwargs)
        self._seeds = itertools.count(seed)
        self._obs: dict[str, Any] | None = None
        self._done = True
        self.rewards: list[float] = []

    def reset(self, seed: int | None = None, **row: Any) -> str:
        """Start a sequence (TRL passes the dataset row's fields): with a `seed` column, the sequence that seed
        draws, so that the G generations of one prompt play the same sequence, as GRPO's group-relative
        advantage needs; without one, the next of this environment's own seeds."""
        obs, info = self.env.reset(seed=int(seed) if seed is not None else next(self._seeds))
        self.rewards = []
        self._obs, self._done = obs, bool(info.get("sequence_done"))
        return self._show()

    def act(self, command: str) -> str:
        """Take one action in the current task.

        Args:
            command: The command to send to the environment, for example "go to fridge 1" or "blue bin".

        Returns:
            What the environment shows next: the next observation, or the end of the task.
        """
        if self._done:
            return "The sequence is over: nothing more to do."
        if int(self._obs["role"]) != 0:
            return "The task has ended: call write_skills with the revised skill document first."
        return self._step(command)

    def write_skills(self, document: str) -> str:
        """Rewrite the skill document that the next tasks of this family will see.

        Args:
            document: The full revised skill document.

        Returns:
            The next task, or the end of the sequence.
        """
        if self._done:
            return "The sequence is over: nothing more to do."
        if int(self._obs["role"]) != 1:
            return "The task is still going: call act with a command."
        return self._step(document)

    def get_reward(self) -> float:
        """The tasks solved in this sequence (each solved task's reward is 1)."""
        return float(sum(self.rewards))

    def _step(self, text: str) -> str:
        obs, reward, terminated, truncated, info = self.env.step(text)
        self.rewards.append(float(reward))
        self._obs, self._done = obs, bool(terminated or truncated)
        if self._done:
            solved = sum(bool(t["success"]) for t in (info.get("summary") or {}).get("tasks", []))
            return f"The sequence is over: {solved} of {int(obs['num_tasks'])} tasks solved."
        return self._show()

    def _show(self) -> str:
        if self._done or self._obs is None:
            return "The sequence is over: nothing to do."
        how = CURATE_HOW if int(self._obs["role"]) == 1 else SOLVE_HOW
        return f"{self._obs['prompt']}\n\n{how}"

    # not a public method: TRL offers every public method as a tool
    def __del__(self) -> None:
        env = getattr(self, "env", None)
        if env is not None:
            try:
                env.close()
            except Exception:  # noqa: BLE001 (interpreter shutdown: nothing left to tell)
                pass


def environment_factory(env_id: str = "SkillRise-Rulebook-v0", seed: int = 0, **make_kwargs: Any
                        ) -> Callable[[], ToolEnvironment]:
    """A zero-argument factory of `ToolEnvironment`s for TRL's `environment_factory`. A dataset row's `seed`
    picks the sequence (`ToolEnvironment.reset`); without one, each made environment draws its own seeds
    (seed, seed + 1000, ...), and the generations of one prompt then play different sequences. An unknown env id, or
    one whose engine's extra is not installed, is refused now (ValueError / MissingDependencyError naming the
    extra), not inside TRL's first batch."""
    from skillrise_gym import benchmarks
    from skillrise_gym.extras import ENGINE_MODULES, require

    ids = benchmarks.env_ids()
    if env_id not in ids:
        raise ValueError(f"unknown env id {env_id!r}; the SkillRise ids are {', '.join(ids)}")
    extra = benchmarks.get(ids[env_id]).extra
    if extra:
        require(extra, ENGINE_MODULES.get(extra, ()), env_id)
    made = itertools.count()
    return lambda: ToolEnvironment(env_id, seed=seed + 1000 * next(made), **make_kwargs)
