"""The agent interface the bench runner drives: observations in, text out, batched where the agent can batch.

An agent gets the observations of every sequence currently waiting for an action (SOLVE and CURATE roles
mixed) and returns one `AgentOutput` per observation, in the same order. The text goes to the env
unchanged; the env parses it (`prompts.parse_action`/`parse_skill`) and reports ``format_valid``. Agents that
write tagged answers themselves use `prompts.action_answer`/`skill_answer`.

The last `info` of each env rides along (`infos`), so agents that read env-side facts work across worker
processes: the expert reads ``info["expert_action"]`` (the runner asks the env for it through
`Agent.needs_expert_info`), the random agent reads the sequence id and step for its seeding. The runner adds ``trial_id`` and ``turn``
(the turns the trial has taken; a replayed sequence counts from 0 again).

Errors: an agent that cannot produce text at all (endpoint down after its retries, a rejected key) raises
`AgentError`; the runner then stops cleanly, keeping every finished sequence, so the same command resumes.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

from skillrise_gym.backends.base import SkillRiseError
from skillrise_gym.prompts import ROLE_CURATE, ROLE_SOLVE, needs_prefill, skill_answer

__all__ = ["ROLE_CURATE", "ROLE_SOLVE", "Agent", "AgentError", "AgentOutput", "check_prefill", "is_curate",
           "keep_document", "stable_seed"]


class AgentError(SkillRiseError, RuntimeError):
    """The agent cannot produce an answer (and retrying will not help now); the message says why.
    `resumable`: whether re-running the same command later can help (a server that was down: yes; an
    unknown model or a refused key: no, the command must change)."""

    def __init__(self, message: str, resumable: bool = True) -> None:
        super().__init__(message)
        self.resumable = resumable


@dataclass
class AgentOutput:
    """One answer of an agent, with what it cost."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    #: agent-side notes for the record (retries used, finish reason, an accepted empty completion...)
    extra: dict[str, Any] = field(default_factory=dict)


class Agent(ABC):
    """Base class of bench agents.

    Subclasses set `name`, implement `act`, and may set:
        needs_expert_info: the env must put the backend expert's next command in ``info["expert_action"]``.
        needs_admissible: the env must list admissible actions in observations (also where it is off by
            default, as for ScienceWorld).
        batch_size: how many observations the agent likes per `act` call (the runner keeps at least this
            many sequences in flight by default).
        can_prefill: whether its answers hold up under prompts that expect a prefilled answer prefix
            (`prompts.needs_prefill`: compact prompts, whose observations carry ``answer_prefix``, the opening
            tag). True when the agent's model continues from ``observation["answer_prefix"]`` and the returned
            text is that prefix plus the continuation (hf), or when the agent writes whole tagged answers and
            needs no prefix (expert, random). False (the default): a model that starts a fresh reply, which
            would lack the tag; `check_prefill` refuses such an agent on those prompts.
        prefill_flag: the option that lets this agent prefill, named in `check_prefill`'s error ("" if none).
    The runner may set `on_call` to a function it wants called with each `AgentOutput` as soon as that
    one model call is done (from any thread): progress for slow models, before a whole round ends.
    """

    name: ClassVar[str] = "agent"
    needs_expert_info: ClassVar[bool] = False
    needs_admissible: ClassVar[bool] = False
    #: the env must put the attempt each curate turn curates in ``info["attempt"]`` (memory methods)
    needs_attempt_info: ClassVar[bool] = False
    batch_size: int = 1
    can_prefill: bool = False  # a class attribute; an agent whose settings decide it overrides it (openai)
    prefill_flag: ClassVar[str] = ""
    on_call: Any = None  # Callable[[AgentOutput], None] | None

    def _report(self, output: AgentOutput) -> None:
        if self.on_call is not None:
            self.on_call(output)

    def in_flight(self) -> int:
        """Model calls running now (an HTTP agent's open requests), for the shutdown message."""
        return 0

    @abstractmethod
    def act(self, observations: Sequence[dict[str, Any]], infos: Sequence[dict[str, Any]] | None = None) -> list[AgentOutput]:
        """One output per observation, in order."""

    def describe(self) -> dict[str, Any]:
        """What identifies this agent's behaviour (stored in a run's manifest; never secrets)."""
        return {"name": self.name}

    def framing(self) -> dict[str, Any]:
        """How this agent frames each model call, as `EpisodeSpec` fields (max_new_tokens, max_prompt_tokens,
        system_prompt, chat_template_kwargs): the ones it has a setting for. Scripted agents have none."""
        return {}

    def close(self) -> None:
        """Release what the agent holds (models, connections)."""


def check_prefill(agent: Agent, style: str) -> None:
    """Refuse (ValueError, one line naming the reason and the flags that fix it) an agent that cannot prefill
    (`Agent.can_prefill`) on prompts of a `style` that needs a prefilled answer prefix (`prompts.needs_prefill`):
    every answer of its model would miss the opening tag and count as invalid format."""
    if agent.can_prefill or not needs_prefill(style):
        return
    fixes = "--prompt-style full" + (f", or {agent.prefill_flag}" if agent.prefill_flag else "")
    raise ValueError(f"prompt style {style!r} has each answer start prefilled with its opening tag (<action>, "
                     f"<skill>, <remark>), which the {agent.name} agent cannot do as configured: its replies would "
                     f"all be invalid format; use {fixes}")


def is_curate(observation: dict[str, Any]) -> bool:
    return int(observation["role"]) == ROLE_CURATE


def keep_document(observation: dict[str, Any]) -> str:
    """The trivial curate answer: the current skill document, unchanged, in <skill> tags."""
    return skill_answer(str(observation.get("skill_document", "")))


def stable_seed(*parts: Any) -> int:
    """A 63-bit seed from strings/ints that is the same in every process (unlike `hash`)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1
