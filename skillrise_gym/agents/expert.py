"""The backend's expert as an agent: the scripted upper line a benchmark's expert reaches through the bench.

The expert's next command is computed inside the env (in its worker process) and read from
``info["expert_action"]``: the runner makes envs with ``expert_in_info=True`` for this agent. When a
backend has no expert command for the current state (None), the agent answers `FALLBACK_ACTION`,
tagged ``extra["no_expert"]``, so the task runs out its step limit instead of stalling the run.
Curate: keep the document unchanged.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

from skillrise_gym.agents.base import Agent, AgentError, AgentOutput, is_curate, keep_document
from skillrise_gym.prompts import action_answer

FALLBACK_ACTION = "look"


class ExpertAgent(Agent):
    name: ClassVar[str] = "expert"
    needs_expert_info: ClassVar[bool] = True
    # it writes whole tagged answers (prompts.action_answer, skill_answer), which the env parses the same under
    # every prompt style: nothing to prefill, so prompts that expect a prefilled prefix are no obstacle
    can_prefill = True

    def __init__(self, batch_size: int = 1) -> None:
        self.batch_size = max(1, int(batch_size))

    def act(self, observations: Sequence[dict[str, Any]], infos: Sequence[dict[str, Any]] | None = None) -> list[AgentOutput]:
        if infos is None or len(infos) != len(observations):
            raise AgentError("the expert agent needs the env's info for every observation (expert_in_info=True)")
        outputs = []
        for observation, info in zip(observations, infos):
            if is_curate(observation):
                outputs.append(AgentOutput(keep_document(observation)))
                continue
            if "expert_action" not in info:
                raise AgentError("info has no 'expert_action': make the env with expert_in_info=True")
            command = info["expert_action"]
            if command:
                outputs.append(AgentOutput(action_answer(command)))
            else:
                outputs.append(AgentOutput(action_answer(FALLBACK_ACTION), extra={"no_expert": True}))
        return outputs
