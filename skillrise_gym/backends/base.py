"""The backend interface: one engine, one task at a time, no knowledge of sequences or skill documents.

A backend lists the `Task`s of a split and plays one task at a time on its engine::

    backend = make_backend("alfworld")
    tasks = backend.list_tasks("train")
    first = backend.reset(tasks[0])          # StepResult with the initial observation
    backend.task_description()               # "put a hot potato in sinkbasin."
    backend.admissible_actions()             # list[str], or None if the benchmark has no such list
    result = backend.step("go to fridge 1")  # StepResult
    backend.expert_action()                  # str, or None if no expert is available
    backend.close()

`reset` may be called again at any time with another task: backends reuse their engine across tasks.
Engines that die raise `EngineError`; the backend restarts its engine on the next `reset`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

from skillrise_gym.tasks import Task


class SkillRiseError(Exception):
    """Base class of this project's errors."""


class MissingDependencyError(SkillRiseError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""


class DataNotFoundError(SkillRiseError, FileNotFoundError):
    """A benchmark's data is not where it was looked for; the message says how to get it."""


class ConfigurationError(SkillRiseError):
    """The engine cannot run with these settings at all (a JVM that refuses its options): no task can be
    played, so a run stops at once and a rerun of the same command would fail the same way."""


class EngineError(SkillRiseError, RuntimeError):
    """The engine failed while playing a task (crashed process, dead JVM, corrupt game).

    The task in flight is lost: consumers report it as an engine error, never as a success or a plain
    failure. The backend is usable again after the next `reset`.
    """


@dataclass
class StepResult:
    """What the engine returned for one reset or step.

    `score` is the engine's own score (ALFWorld 0/1, WebShop reward 0..1, ScienceWorld -100..100);
    `success` is the benchmark's success criterion; `done` is the engine's own end of episode (which may
    come without success, e.g. a wrong purchase or a wrong focus).
    """

    observation: str
    score: float = 0.0
    done: bool = False
    success: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ActionGrammar:
    """The command grammar of a state, as data: where a benchmark has no admissible list (or it is too
    expensive), what a prompt can show instead. `templates` are command shapes ("open OBJ", "search[<query>]"),
    `objects` what fills their slots now (may be empty). How it is worded is the prompts' business
    (`prompts.render_action_grammar`), never the backend's."""

    templates: tuple[str, ...]
    objects: tuple[str, ...] = ()


class Backend(ABC):
    """One engine. Subclasses set the class attributes and implement the abstract methods."""

    #: benchmark name, as in `Task.benchmark` ("alfworld", "webshop", "scienceworld")
    benchmark: ClassVar[str]
    #: split names accepted by `list_tasks`
    splits: ClassVar[Sequence[str]]
    #: default per-task step limit used by `SequenceEnv` when `max_task_steps` is not given
    default_max_task_steps: ClassVar[int]
    #: whether `SequenceEnv` asks for admissible actions every step unless told otherwise (a backend whose
    #: list is expensive, like ScienceWorld's, sets False and offers `action_grammar` instead)
    admissible_by_default: ClassVar[bool] = True
    #: prompt style `SequenceEnv` renders unless told otherwise (`prompts.STYLES`: "full" or "compact")
    prompt_style: ClassVar[str] = "full"
    #: memory one env holds on its own, beyond what the envs of a process share (bytes; 0: too little to
    #: matter): `skillrise-train --envs 0` sizes its env pool to the available memory by it
    env_memory: ClassVar[int] = 0

    def state_unless_live(self, live: bool, why: str) -> dict:
        """For `__getstate__` of backends whose engine cannot be pickled: the instance's state before reset,
        TypeError saying `why` once an engine is running (pickle and deepcopy both come here)."""
        if live:
            raise TypeError(
                f"this {self.benchmark} env cannot be pickled or copied once reset: {why}. Pickle or copy it "
                "before reset, or make another with gym.make(env.spec) and reset it with the same seed and options "
                "(sequences and worlds are reproducible from them)"
            )
        return dict(self.__dict__)

    @classmethod
    def data_identity(cls, options: dict[str, Any]) -> dict[str, str]:
        """Where this backend's tasks come from with these constructor options: {"source": a readable
        location, "fingerprint": what must match for two runs to hold the same tasks}, or {} when the
        options alone decide them (generated backends). The bench stores it in a run's manifest and refuses
        to resume a run whose data changed underneath it (a new $ALFWORLD_DATA, another catalog)."""
        return {}

    #: other names of splits (an upstream's), each the name of one of `splits`
    split_aliases: ClassVar[dict[str, str]] = {}

    @classmethod
    def canonical_split(cls, split: str) -> str:
        """`split` by its name here (an alias, such as ALFWorld's upstream valid_seen, becomes the split it
        names); an unknown split is a ValueError listing the known ones."""
        split = cls.split_aliases.get(split, split)
        cls.check_split(split)
        return split

    @classmethod
    def check_split(cls, split: str) -> None:
        if split in cls.split_aliases:
            return
        if split not in cls.splits:
            also = (f" (also {', '.join(cls.split_aliases)}: " + ", ".join(
                f"{a} is {t}" for a, t in cls.split_aliases.items()) + ")") if cls.split_aliases else ""
            raise ValueError(f"unknown split {split!r} for {cls.benchmark}; known splits: {', '.join(cls.splits)}{also}")

    @abstractmethod
    def list_tasks(self, split: str) -> list[Task]:
        """All tasks of a split, in a deterministic order. Raises ValueError for an unknown split."""

    @abstractmethod
    def reset(self, task: Task) -> StepResult:
        """Load `task` into the engine and return its initial observation."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Send one command to the engine."""

    @abstractmethod
    def task_description(self) -> str:
        """The goal of the current task in natural language."""

    def admissible_actions(self) -> list[str] | None:
        """Actions the engine accepts now, or None when the benchmark has no such list."""
        return None

    def action_grammar(self) -> ActionGrammar | None:
        """The command grammar of the current state (templates and objects) for prompts that show no
        admissible list, or None when the admissible list (or nothing) serves."""
        return None

    def expert_action(self) -> str | None:
        """The expert's next action for the current state, or None when there is no expert."""
        return None

    @classmethod
    def facts(cls, task: Task) -> list[tuple[str, ...]]:
        """What playing `task` reveals that holds for its whole family, each fact the words that state it
        together (the transfer probe: its kind and its bin's colour); [] where the benchmark does not say.
        For measuring what carried documents hold (skillrise_gym/documents.py), never shown to agents."""
        return []

    @classmethod
    def instance_words(cls, task: Task) -> list[str]:
        """Words naming this instance only (the probe: its brand and object), which a document that keeps
        rules should drop; [] where the benchmark does not say."""
        return []

    def close(self) -> None:
        """Release the engine (processes, JVMs, temp files). Idempotent."""

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
