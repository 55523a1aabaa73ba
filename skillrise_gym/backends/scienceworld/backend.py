"""`ScienceWorldBackend`: ScienceWorld's tasks on the real simulator, as a `Backend` (tasks, splits, families,
options, difficulty, episodes and their `StepResult`s). The simulator itself (the `scienceworld` package's JVM,
through py4j: loading, the fast step, the action lists and their RNG convention, gold paths) is engine.py's
`ScienceWorldEngine`.

Conventions (see docs/scienceworld.md for the user-facing version):

* Tasks: every variation of the 30 tasks; splits are the engine's own train/dev/test variation lists.
  `Task.id` is "<task name>-<variation>" (e.g. "boil-21"); payload {task_name, variation, simplifications}.
* Success is score >= 100 (the engine's own completion). A negative score (the wrong-focus failure, -100)
  ends the task as a failure. The engine's tick-based step limit is not applied: `SequenceEnv` counts
  agent steps (`default_max_task_steps` = 30, as the reference).
* Steps go to the engine's agent interface directly (engine.py's fast step). `admissible_actions()` and
  `action_grammar()` save and restore the simulator's RNG, so asking for them never changes what happens next
  (engine.py's RNG convention). One JVM is reused across tasks, started with -XX:hashCode=2, under which
  worlds do not depend on load history.
* Engine failures raise `EngineError`; the task in flight is then lost (steps raise until the next reset,
  which starts a new JVM if the old one died).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence

from skillrise_gym.backends import require
from skillrise_gym.backends.base import ActionGrammar, Backend, EngineError, StepResult
from skillrise_gym.backends.scienceworld import catalog
from skillrise_gym.backends.scienceworld.engine import (  # noqa: F401  (re-exported: imported from here)
    EMPTY_OBSERVATION,
    UNKNOWN_ACTION,
    WRAPPER_COMMANDS,
    JVMGone,
    ScienceWorldEngine,
)
from skillrise_gym.backends.scienceworld.jvm import ScienceWorldJVM, find_java
from skillrise_gym.tasks import Task

SIMPLIFICATIONS = ("teleportAction", "selfWateringFlowerPots", "openContainers", "openDoors", "noElectricalAction")
FAMILY_MODES = ("task", "topic")
DIFFICULTY_MODES = ("cached", "gold", "fallback")


def _check_simplifications(value: str, task_name: str | None = None) -> str:
    parts = [p for p in value.split(",") if p]
    unknown = [p for p in parts if p not in SIMPLIFICATIONS and p != "easy"]
    if unknown:
        raise ValueError(
            f"unknown ScienceWorld simplification(s) {unknown}; known: easy, {', '.join(SIMPLIFICATIONS)} (comma-separated)"
        )
    if task_name and ("power-component" in task_name or "conductivity" in task_name) and "noElectricalAction" in parts:
        raise ValueError(f"task {task_name!r} needs electrical actions; remove 'noElectricalAction' from simplifications")
    return ",".join(parts)


@dataclass
class _Episode:
    """The task being played and the actions taken in it."""

    task: Task
    task_name: str
    variation: int
    simplifications: str
    description: str
    actions: list[str] = field(default_factory=list)
    observation: str = ""
    score: int = 0
    done: bool = False
    gold: list[str] | None = None


class _OnEngine:
    """A backend attribute kept on its `ScienceWorldEngine` (so setting, e.g., `call_timeout` on the backend
    reaches the next JVM it starts)."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = self.name or name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        return self if obj is None else getattr(obj._sim, self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(obj._sim, self.name, value)


class ScienceWorldBackend(Backend):
    """ScienceWorld on its JVM. Options (all keyword, all passed through `backend_options` of `gym.make`):

    simplifications: comma-separated engine simplifications, default "easy" (all of them, as the reference).
    family: "task" (default: each of the 30 tasks is a family) or "topic" (the 7 topics of tasks.json).
    tasks: restrict to these task names (default: all 30).
    difficulty: "fallback" (default: the task's typical gold length + variation/10000, the same on every
        machine, so a seed draws the same sequences everywhere), "cached" (gold path length where cached on
        disk, else the fallback: orders change as the cache fills), "gold" (compute missing gold paths in
        `list_tasks`: slow, a JVM start and the engine's planner per variation).
    max_heap: JVM -Xmx value (default "1g"; None for the JVM default, which grows to several GB).
    deterministic: start the JVM with -XX:hashCode=2 (default True; see engine.py's docstring).
    jvm_options: extra JVM options.
    java: path or name of the java executable (default: $SCIWORLD_JAVA_HOME, $JAVA_HOME, then PATH).
    call_timeout: seconds one engine call may take before the JVM is declared hung and killed.
    max_action_chars: longer actions are answered with the engine's unknown-action message without being
        sent (no ScienceWorld action is anywhere near this long).
    """

    java = _OnEngine()
    max_heap = _OnEngine()
    deterministic = _OnEngine()
    jvm_options = _OnEngine()
    call_timeout = _OnEngine()
    max_action_chars = _OnEngine()
    #: how many JVMs this backend has started (the first, plus restarts after crashes)
    jvm_starts = _OnEngine("starts")
    #: the current JVM (None before the first start or after close)
    _jvm = _OnEngine("jvm")

    benchmark: ClassVar[str] = "scienceworld"
    splits: ClassVar[tuple[str, ...]] = catalog.SPLITS
    default_max_task_steps: ClassVar[int] = 30
    admissible_by_default: ClassVar[bool] = False
    #: one JVM per env: the 1 GB heap cap plus 100-200 MB beyond it (docs/scienceworld.md, memory)
    env_memory: ClassVar[int] = 1_200_000_000

    #: inclusive bounds checked when an env is made (`check_options`)
    option_ranges: ClassVar[dict[str, tuple[float, float]]] = {
        "max_action_chars": (1, 1_000_000), "call_timeout": (0.001, 86_400.0),
    }

    @classmethod
    def data_identity(cls, options: dict[str, Any]) -> dict[str, str]:
        """The installed engine: its worlds and gold paths come with the scienceworld package's jar."""
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("scienceworld")
        except PackageNotFoundError:
            installed = "absent"
        return {"source": f"scienceworld {installed}", "fingerprint": f"scienceworld:{installed}"}

    @staticmethod
    def validate_options(options: dict[str, Any]) -> None:
        """Value checks beyond types and ranges (`check_options` calls this when an env is made)."""
        max_heap = options.get("max_heap")
        if max_heap is not None and not re.fullmatch(r"\d+[kKmMgGtT]?", str(max_heap)):
            raise ValueError(f"scienceworld option max_heap must be a JVM heap size such as '1g' or '512m', got "
                             f"{max_heap!r}")

    def __init__(
        self,
        simplifications: str = "easy",
        family: str = "task",
        tasks: Sequence[str] | None = None,
        difficulty: str = "fallback",
        max_heap: str | None = "1g",
        deterministic: bool = True,
        jvm_options: Sequence[str] = (),
        java: str | None = None,
        call_timeout: float | None = 300.0,
        max_action_chars: int = 1000,
    ) -> None:
        require("scienceworld", "scienceworld", "The ScienceWorld backend")
        if family not in FAMILY_MODES:
            raise ValueError(f"family must be one of {FAMILY_MODES}, not {family!r}")
        if difficulty not in DIFFICULTY_MODES:
            raise ValueError(f"difficulty must be one of {DIFFICULTY_MODES}, not {difficulty!r}")
        self.simplifications = _check_simplifications(simplifications)
        self.family = family
        self.task_names = [catalog.check_task_name(t) for t in tasks] if tasks else catalog.task_names()
        self.difficulty_mode = difficulty
        self.validate_options({"max_heap": max_heap})
        #: the simulator: its JVM and the world loaded in it (also holds the JVM settings above)
        self._sim = ScienceWorldEngine(
            java=find_java(java),  # fail now, with the fix in the message, rather than at the first reset
            max_heap=max_heap,
            deterministic=deterministic,
            jvm_options=jvm_options,
            call_timeout=call_timeout,
            max_action_chars=max_action_chars,
        )
        self._episode: _Episode | None = None
        #: why the last task was lost to an engine failure (steps then raise EngineError until the next reset)
        self._lost: str | None = None
        self._last_description: str | None = None
        self._splits: dict[str, dict[str, list[int]]] | None = None
        self._max_variations: dict[str, int] = {}

    # ------------------------------------------------------------------ JVM
    def _engine(self) -> ScienceWorldJVM:
        """The running JVM, starting one (or a replacement for a dead one) when needed."""
        return self._sim.running()

    def _engine_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call the simulator; a JVM found gone loses the task in flight, if any (a new JVM would not hold it:
        steps raise `EngineError` until the next reset)."""
        try:
            return fn(*args)
        except JVMGone as exc:
            self._lose_episode(str(exc))
            raise EngineError(f"{self._lost}; reset to continue") from None

    def _lose_episode(self, reason: str) -> None:
        if self._episode is not None:
            self._lost = f"task {self._episode.task.id} lost: {reason}"
        self._episode = None

    @property
    def jvm_pid(self) -> int | None:
        """Process id of the current JVM (None before the first start or after close)."""
        return self._sim.pid

    def __getstate__(self) -> dict:
        return self.state_unless_live(self._sim.jvm is not None, "its engine is a JVM in another process, reached through a py4j socket")

    def close(self) -> None:
        self._sim.close()
        self._episode = None

    # ------------------------------------------------------------------ tasks
    def split_variations(self) -> dict[str, dict[str, list[int]]]:
        """task name -> split -> variation indices, from the engine (cached on disk per engine version)."""
        if self._splits is None:
            data = catalog.load_cached_splits()
            if data is None:
                data = self._sim.read_splits()
                catalog.save_splits(data)
            self._splits = data
        return self._splits

    def max_variations(self, task_name: str) -> int:
        if task_name not in self._max_variations:
            table = self.split_variations()[catalog.check_task_name(task_name)]
            self._max_variations[task_name] = max(max(v, default=-1) for v in table.values()) + 1
        return self._max_variations[task_name]

    def family_of(self, task_name: str) -> str:
        return catalog.task_topics()[task_name] if self.family == "topic" else task_name

    def list_tasks(self, split: str) -> list[Task]:
        self.check_split(split)
        table = self.split_variations()
        lengths: dict[tuple[str, int], int] = {}
        if self.difficulty_mode != "fallback":
            lengths = catalog.cached_gold_lengths(self.simplifications, self.deterministic)
        tasks = []
        for name in self.task_names:
            for variation in table[name][split]:
                length = lengths.get((name, variation))
                if length is None and self.difficulty_mode == "gold":
                    length = len(self.gold_actions(name, variation))
                tasks.append(
                    Task(
                        benchmark=self.benchmark,
                        id=f"{name}-{variation}",
                        family=self.family_of(name),
                        difficulty=float(length) if length is not None else catalog.fallback_difficulty(name, variation),
                        split=split,
                        payload={"task_name": name, "variation": variation, "simplifications": self.simplifications},
                    )
                )
        return tasks

    def make_task(self, task_name: str, variation: int, split: str | None = None) -> Task:
        """A `Task` for any (task name, variation), e.g. to replay a recorded one."""
        catalog.check_task_name(task_name)
        if split is None:
            table = self.split_variations()[task_name]
            split = next((s for s in self.splits if variation in table[s]), "train")
        gold = catalog.read_gold(self.simplifications, self.deterministic, task_name, variation)
        return Task(
            benchmark=self.benchmark,
            id=f"{task_name}-{variation}",
            family=self.family_of(task_name),
            difficulty=float(len(gold)) if gold is not None else catalog.fallback_difficulty(task_name, variation),
            split=split,
            payload={"task_name": task_name, "variation": variation, "simplifications": self.simplifications},
        )

    # ------------------------------------------------------------------ episodes
    def _task_args(self, task: Task) -> tuple[str, int, str]:
        payload = task.payload
        if task.benchmark != self.benchmark:
            raise ValueError(f"task {task.id!r} belongs to {task.benchmark!r}, not scienceworld")
        try:
            name = str(payload["task_name"])
            variation = payload["variation"]
        except KeyError as exc:
            raise ValueError(f"task {task.id!r} has no {exc.args[0]!r} in its payload") from None
        catalog.check_task_name(name)
        if isinstance(variation, bool) or not isinstance(variation, int):
            raise ValueError(f"task {task.id!r}: variation must be an int, not {variation!r}")
        count = self.max_variations(name)
        if not 0 <= variation < count:
            raise ValueError(f"task {task.id!r}: variation {variation} is out of range for {name!r} (0..{count - 1})")
        simplifications = _check_simplifications(str(payload.get("simplifications", self.simplifications)), name)
        return name, variation, simplifications

    def _load(self, name: str, variation: int, simplifications: str) -> tuple[str, int, bool, int]:
        """Load a fresh world and make the first move ("look around", as the stock reset does).

        Returns that move's (observation, score, done, moves): some tasks give partial credit at once."""
        return self._engine_call(self._sim.load, name, variation, simplifications)

    def reset(self, task: Task) -> StepResult:
        name, variation, simplifications = self._task_args(task)
        self._episode, self._lost = None, None
        observation, score, done, moves = self._load(name, variation, simplifications)
        description = self._sim.task_description()
        self._episode = _Episode(
            task=task,
            task_name=name,
            variation=variation,
            simplifications=simplifications,
            description=description,
            observation=observation,
            score=score,
            done=done,
            gold=catalog.read_gold(simplifications, self.deterministic, name, variation),
        )
        self._last_description = description
        info = self._info(score, 0, moves)
        return StepResult(observation=observation, score=float(score), done=done, success=score >= 100, info=info)

    def _engine_step(self, action: str) -> tuple[str, int, bool, int]:
        """One transition: (observation, score -100..100, done, moves), by engine.py's fast step."""
        return self._engine_call(self._sim.step, action)

    def _info(self, score: int, previous: int, moves: int) -> dict[str, Any]:
        ep = self._episode
        return {
            "score_raw": score,
            "score01": max(score, 0) / 100.0,
            "score_delta": score - previous,
            "moves": moves,
            "failed": score < 0,
            "task_name": ep.task_name if ep else None,
            "variation": ep.variation if ep else None,
        }

    def step(self, action: str) -> StepResult:
        ep = self._require_episode()
        action = str(action)
        try:
            observation, score, done, moves = self._engine_step(action)
        except EngineError as exc:
            if self._episode is None:
                raise
            self._lose_episode(str(exc))  # the task in flight is lost; the next reset restarts the JVM if needed
            raise EngineError(self._lost) from exc
        previous = ep.score
        ep.actions.append(action)
        ep.observation, ep.score, ep.done = observation, score, done
        info = self._info(score, previous, moves)
        info["unknown_action"] = observation == UNKNOWN_ACTION
        return StepResult(observation=observation, score=float(score), done=done, success=score >= 100, info=info)

    def _require_episode(self) -> _Episode:
        if self._episode is None:
            if self._lost:
                raise EngineError(f"{self._lost}; reset to continue")
            raise RuntimeError("no ScienceWorld task is loaded: call reset(task) first (or again, after an EngineError)")
        return self._episode

    def task_description(self) -> str:
        if self._episode is None and self._last_description is not None:
            return self._last_description  # still describes the task that was lost
        return self._require_episode().description

    # ------------------------------------------------------------------ action lists
    def _observe(self, query: Callable[[], Any]) -> Any:
        """Run a query that leaves the world as it was (engine.py's RNG convention); an engine failure loses
        the task in flight."""
        try:
            return self._engine_call(query)
        except EngineError as exc:
            self._lose_episode(str(exc))
            raise

    def admissible_actions(self) -> list[str]:
        """The engine's full valid action list for the current state (slow next to a step: the engine
        enumerates every action template with every combination of visible objects)."""
        self._require_episode()
        return self._observe(self._sim.valid_actions)

    def action_templates(self) -> tuple[list[str], list[str]]:
        """(action templates such as "open OBJ", objects visible now): two cheap calls."""
        self._require_episode()
        return self._observe(self._sim.action_templates)

    def action_grammar(self) -> ActionGrammar | None:
        """Action templates and current objects (None when no task is being played, e.g. after an engine
        failure: it is a prompt aid, and the failure is reported by step)."""
        if self._episode is None:
            return None
        try:
            templates, objects = self.action_templates()
        except EngineError:
            return None
        return ActionGrammar(templates=tuple(templates), objects=tuple(objects))

    # ------------------------------------------------------------------ expert
    def gold_actions(self, task_name: str, variation: int, simplifications: str | None = None) -> list[str]:
        """The engine's gold action sequence (from the disk cache, else computed and cached).

        The engine plans a gold path with state that depends on everything its JVM did before (the same
        variation gave 96 or 108 steps after other load orders), so a missing path is computed in a JVM
        started for it alone and closed after: the same path in every process, whatever it loaded before,
        as a fresh stock `ScienceWorldEnv` gives it. The JVM holding the current task is not touched.
        Each missing path costs a JVM start and the planner, once per machine (the disk cache).
        """
        simplifications = self.simplifications if simplifications is None else simplifications
        cached = catalog.read_gold(simplifications, self.deterministic, task_name, variation)
        if cached is not None:
            return cached
        gold = self._sim.gold_path(task_name, variation, simplifications)
        catalog.write_gold(simplifications, self.deterministic, task_name, variation, gold)
        return gold

    def expert_action(self) -> str | None:
        """The next gold action while the agent has followed the gold path so far; None once it has left it
        (the engine's gold path is a fixed plan, not a policy), when the task is over, or when the engine
        failed while computing the path (the task is then lost and the next step raises EngineError)."""
        ep = self._episode
        if ep is None or ep.done:
            return None
        if ep.gold is None:
            try:
                ep.gold = self.gold_actions(ep.task_name, ep.variation, ep.simplifications)
            except EngineError as exc:
                self._lose_episode(str(exc))
                return None
        k = len(ep.actions)
        if k >= len(ep.gold) or ep.actions != ep.gold[:k]:
            return None
        return ep.gold[k]

