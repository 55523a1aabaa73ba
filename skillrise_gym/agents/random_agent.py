"""A seeded random agent: a uniformly drawn admissible action; curate keeps the document.

Choices depend only on (seed, sequence id, task position, step index), never on batching, worker count
or the order in which sequences are scheduled: a resumed or re-parallelised run plays the same actions.

Backends without an admissible list: the runner asks envs for the list (`needs_admissible`); where the
engine still gives none, the agent draws from `FALLBACK_ACTIONS` of the benchmark (harmless commands every
engine accepts: looking around, the inventory), so it explores nothing but never crashes the run.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import numpy as np

from skillrise_gym.agents.base import Agent, AgentOutput, is_curate, keep_document, stable_seed
from skillrise_gym.benchmarks import TABLE
from skillrise_gym.prompts import action_answer

#: benchmark -> its fallback commands (`benchmarks.TABLE`); the others get `DEFAULT_FALLBACK`
FALLBACK_ACTIONS: dict[str, tuple[str, ...]] = {row.name: row.fallback_actions for row in TABLE if row.fallback_actions}
DEFAULT_FALLBACK = ("look",)


class RandomAgent(Agent):
    name: ClassVar[str] = "random"
    needs_admissible: ClassVar[bool] = True
    can_prefill = True  # whole tagged answers (prompts.action_answer, skill_answer): see ExpertAgent

    def __init__(self, seed: int = 0, benchmark: str | None = None, batch_size: int = 1) -> None:
        self.seed = int(seed)
        self.benchmark = benchmark
        self.batch_size = max(1, int(batch_size))

    def act(self, observations: Sequence[dict[str, Any]], infos: Sequence[dict[str, Any]] | None = None) -> list[AgentOutput]:
        infos = infos if infos is not None else [{}] * len(observations)
        outputs = []
        for observation, info in zip(observations, infos):
            if is_curate(observation):
                outputs.append(AgentOutput(keep_document(observation)))
                continue
            choices = tuple(observation.get("admissible_actions") or ())
            extra: dict[str, Any] = {}
            if not choices:
                choices = FALLBACK_ACTIONS.get(self.benchmark or "", DEFAULT_FALLBACK)
                extra["fallback"] = True
            rng = np.random.default_rng(stable_seed(
                self.seed, info.get("sequence_id", ""), info.get("trial_id", ""),
                int(observation.get("position", 0)), info.get("step_index", 0), info.get("role", ""),
            ))
            outputs.append(AgentOutput(action_answer(choices[int(rng.integers(len(choices)))]), extra=extra))
        return outputs

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "seed": self.seed}
