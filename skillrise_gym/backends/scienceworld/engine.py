"""The ScienceWorld simulator as the backend drives it: a JVM (the `scienceworld` package's engine, through py4j)
and the world loaded in it. Nothing here knows tasks, splits or `StepResult`s (backend.py does).

`ScienceWorldEngine` starts the JVM (and a replacement after a crash), reads the engine's split lists, loads a
world, steps it (observation, score, completion, move count), fetches the valid-action list and the action
templates, and computes gold paths in a JVM of their own.

* Fast step: the engine's agent interface directly, plus score, completion and move count. The stock
  `ScienceWorldEnv.step` also fetches look, inventory, task description and the valid-action list on
  every step, and the engine's own wrapper computes a look, an inventory and every visible referent for
  its history and debug output (see `ScienceWorldEngine.step`).
* RNG convention: computing the valid-action list draws from the simulator's global RNG (and bees, wandering
  animals... draw from it on every tick). `valid_actions()` and `action_templates()` save and restore that
  RNG, so asking for them never changes what happens next: the world evolves exactly as if they were never
  called. (The stock `step`, which computes the list on every step, therefore diverges from us on the
  tasks whose ticks use the RNG: grow-fruit and the mendelian-genetics tasks.)
* Determinism: one JVM is reused across tasks, started with -XX:hashCode=2, under which worlds do not
  depend on load history (the same task plays identically whatever was loaded before, in any process).
* A JVM found dead while a world is loaded raises `JVMGone` (an `EngineError`): a new JVM would have lost the
  world, so only `running()` (used to load one) starts a replacement.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from skillrise_gym.backends.base import EngineError
from skillrise_gym.backends.scienceworld import catalog
from skillrise_gym.backends.scienceworld.jvm import ScienceWorldJVM

logger = logging.getLogger(__name__)

UNKNOWN_ACTION = "No known action matches that input."
#: inputs that the engine's Python-facing wrapper answers itself, without the agent interface
WRAPPER_COMMANDS = frozenset({"help", "objects", "task"})
#: what the wrapper answers when the agent interface returns an empty observation
EMPTY_OBSERVATION = "Unknown action.  Type 'help' for a list of actions, and 'objects' for a list of possible object referents."


class JVMGone(EngineError):
    """The JVM holding the loaded world is gone (crashed, killed, closed or never started)."""


class ScienceWorldEngine:
    """One ScienceWorld simulator: a JVM, restarted on demand, and the world loaded in it.

    The JVM settings are plain attributes, read each time a JVM is started (the backend exposes them as its
    own). `step` returns (observation, score -100..100, done, moves); engine failures raise `EngineError`.
    """

    def __init__(
        self,
        java: str,
        max_heap: str | None,
        deterministic: bool,
        jvm_options: Sequence[str],
        call_timeout: float | None,
        max_action_chars: int,
    ) -> None:
        self.java = java
        self.max_heap = max_heap
        self.deterministic = deterministic
        self.jvm_options = tuple(jvm_options)
        self.call_timeout = call_timeout
        self.max_action_chars = max_action_chars
        self.jvm: ScienceWorldJVM | None = None
        #: the loaded world's AgentInterface (fast steps go to it directly; replaced on every load)
        self.agent: Any = None
        #: how many JVMs this engine has started (the first, plus restarts after crashes)
        self.starts = 0
        #: the loaded world's action templates (fixed for a world: see `action_templates`), once asked for
        self._templates: list[str] | None = None
        #: the last fast step's (score, completed), not yet written to the wrapper's fields (`_sync_wrapper`)
        self._unsynced: tuple[float, bool] | None = None

    # ------------------------------------------------------------------ JVM
    def _new_jvm(self) -> ScienceWorldJVM:
        return ScienceWorldJVM(java=self.java, max_heap=self.max_heap, deterministic=self.deterministic,
                               extra_jvm_options=self.jvm_options, call_timeout=self.call_timeout)

    def running(self) -> ScienceWorldJVM:
        """The running JVM, starting one (or a replacement for a dead one) when needed."""
        if self.jvm is None or not self.jvm.alive:
            if self.jvm is not None:
                logger.warning("ScienceWorld JVM is gone (%s); starting a new one", self.jvm.dead_reason)
                self.jvm.close()
            self.jvm = self._new_jvm()
            self.starts += 1
        return self.jvm

    def live(self) -> ScienceWorldJVM:
        """The JVM holding the loaded world; never restarts one (a new JVM has lost the world): `JVMGone`."""
        if self.jvm is None or not self.jvm.alive:
            reason = self.jvm.dead_reason if self.jvm is not None else "not started"
            raise JVMGone(f"the ScienceWorld JVM holding this task is gone ({reason})")
        return self.jvm

    @property
    def pid(self) -> int | None:
        """Process id of the current JVM (None before the first start or after close)."""
        return self.jvm.pid if self.jvm is not None and self.jvm.alive else None

    def close(self) -> None:
        if self.jvm is not None:
            self.jvm.close()
            self.jvm = None

    # ------------------------------------------------------------------ engine data
    def read_splits(self) -> dict[str, dict[str, list[int]]]:
        """task name -> split -> variation indices, as the engine lists them."""
        jvm = self.running()
        server = jvm.server
        set_task = getattr(server, "taskStr_$eq")
        previous = jvm.call("taskStr", server.taskStr)
        data: dict[str, dict[str, list[int]]] = {}
        for name in catalog.task_names():
            jvm.call("set task", set_task, name)
            data[name] = {
                split: _parse_int_list(jvm.call(f"variations of {name}", getter().toString))
                for split, getter in (
                    ("train", server.getVariationsTrain),
                    ("dev", server.getVariationsDev),
                    ("test", server.getVariationsTest),
                )
            }
        jvm.call("set task", set_task, previous)
        return data

    def gold_path(self, task_name: str, variation: int, simplifications: str) -> list[str]:
        """The engine's gold action sequence, computed in a JVM started for it alone and closed after (the
        engine's planner depends on everything its JVM did before; see `ScienceWorldBackend.gold_actions`).
        The JVM holding the loaded world is not touched."""
        from py4j.protocol import Py4JJavaError

        jvm = self._new_jvm()
        try:
            server = jvm.server
            try:
                error = jvm.call("gold path", server.load, task_name, variation, simplifications, True)
            except Py4JJavaError as exc:
                raise ValueError(f"ScienceWorld could not make a gold path for {task_name} {variation}: "
                                 f"{exc.java_exception}") from None
            if error:
                raise ValueError(f"ScienceWorld could not make a gold path for {task_name} {variation}: {error}")
            return jvm.call("gold path", lambda: jvm.strings(server.getGoldActionSequence()))
        finally:
            jvm.close()

    # ------------------------------------------------------------------ playing
    def load(self, name: str, variation: int, simplifications: str) -> tuple[str, int, bool, int]:
        """Load a fresh world and make the first move ("look around", as the stock reset does).

        Returns that move's (observation, score, done, moves): some tasks give partial credit at once."""
        from py4j.protocol import Py4JJavaError

        jvm = self.running()
        self.agent = None
        self._templates = None
        self._unsynced = None  # load resets the wrapper's score and completion
        try:
            error = jvm.call("load", jvm.server.load, name, variation, simplifications, False)
        except Py4JJavaError as exc:
            raise ValueError(f"ScienceWorld refused to load {name} variation {variation}: {exc.java_exception}") from None
        if error:
            raise ValueError(f"ScienceWorld refused to load {name} variation {variation}: {error}")
        self.agent = jvm.call("load", lambda: jvm.server.agentInterface().get())
        return self.step("look around")

    def task_description(self) -> str:
        jvm = self.running()
        return jvm.call("task description", jvm.server.getTaskDescription)

    def step(self, action: str) -> tuple[str, int, bool, int]:
        """One transition: (observation, score -100..100, done, moves).

        The engine's `PythonInterface.step` wraps `AgentInterface.step` with work we do not need on every
        step: a look and an inventory for its run history, and the referents of every visible object for a
        debug print. We call the agent interface directly, in three py4j round trips (the step, its result
        tuple as one string, the move count), and write the wrapper's score and completion fields only
        before the wrapper itself is used (`_sync_wrapper`), for the few inputs it answers itself.
        Observations, scores and the RNG stream are the same as through the wrapper (tests compare with the
        stock step).
        """
        from py4j.java_gateway import get_method
        from py4j.protocol import Py4JJavaError

        jvm = self.live()
        server = jvm.server
        try:
            if len(action) > self.max_action_chars:
                self._sync_wrapper(jvm)
                return UNKNOWN_ACTION, int(round(100 * jvm.call("score", server.getScore))), False, int(
                    jvm.call("moves", server.getNumMoves)
                )
            if self.agent is None or action.strip().lower() in WRAPPER_COMMANDS:
                self._sync_wrapper(jvm)
                observation = jvm.call("step", server.step, action)
                raw_score = float(jvm.call("score", server.getScore))
                completed = bool(jvm.call("completed", server.getCompleted))
            else:
                result = jvm.call("step", self.agent.step, action)
                # the (observation, score, completed) tuple as one string: one round trip, not three
                observation, raw_score, completed = parse_step_result(jvm.call("step", get_method(result, "toString")))
                self._unsynced = (raw_score, completed)
            moves = int(jvm.call("moves", server.getNumMoves))
        except Py4JJavaError as exc:
            # The engine threw inside its own step: the world may be half-updated, so the task is lost.
            raise EngineError(f"ScienceWorld raised an exception on action {action[:80]!r}: {exc.java_exception}") from None
        score = int(round(100 * raw_score))
        # A negative score is the engine's task failure (e.g. focusing on the wrong object); the stock
        # wrapper ends the episode on it, and so do we.
        return str(observation), score, completed or score < 0, moves

    def _sync_wrapper(self, jvm: ScienceWorldJVM) -> None:
        """Write the last fast step's score and completion into the wrapper (`PythonInterface`), whose own
        step and getters read them; fast steps leave them to this, two round trips fewer per step."""
        if self._unsynced is not None:
            score, completed = self._unsynced
            jvm.call("score", getattr(jvm.server, "score_$eq"), score)
            jvm.call("completed", getattr(jvm.server, "isComplete_$eq"), completed)
            self._unsynced = None

    # ------------------------------------------------------------------ action lists
    def without_rng_side_effects(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` and restore the simulator's global RNG, so observing the world never changes its future."""
        jvm = self.live()
        state = jvm.call("read RNG", jvm.rng_state)
        try:
            return fn()
        finally:
            if jvm.alive:
                jvm.call("restore RNG", jvm.set_rng_state, state)

    def valid_actions(self) -> list[str]:
        """The engine's full valid action list for the current state (slow next to a step: the engine
        enumerates every action template with every combination of visible objects)."""
        jvm = self.live()
        return self.without_rng_side_effects(
            lambda: jvm.call("valid actions", lambda: jvm.strings(jvm.server.getValidActionObjectCombinations())),
        )

    def action_templates(self) -> tuple[list[str], list[str]]:
        """(action templates such as "open OBJ", objects visible now).

        The templates are the loaded world's action handler's examples (`AgentInterface.getPossibleActions`:
        the handler is built once per load, after the simplifications, and never changes), so they are
        fetched once per world; the objects are fetched every time."""
        jvm = self.live()
        world = self.agent

        def fetch() -> tuple[list[str], list[str]]:
            templates = self._templates
            if templates is None:
                templates = jvm.call("action templates", lambda: jvm.strings(jvm.server.getPossibleActions()))
            objects = jvm.call("objects", lambda: jvm.strings(jvm.server.getPossibleObjects()))
            return templates, objects

        templates, objects = self.without_rng_side_effects(fetch)
        if world is not None and world is self.agent:
            self._templates = templates
        return list(templates), objects


def parse_step_result(text: str | None) -> tuple[str, float, bool]:
    """(observation, score 0..1 or negative, completed) from `AgentInterface.step`'s result, a Scala
    Tuple3 printed as "(observation,score,completed)". The observation may hold commas and parentheses;
    the score (a Java double) and the flag never do, so they are split off the right. A null or empty
    observation is the engine's silence on an input it ignores: `EMPTY_OBSERVATION`, as the wrapper says."""
    if not text or text[0] != "(" or text[-1] != ")" or text.count(",") < 2:
        raise EngineError(f"ScienceWorld returned an unexpected step result: {str(text)[:120]!r}")
    observation, score, completed = text[1:-1].rsplit(",", 2)
    try:
        value = float(score)
    except ValueError:
        value = None
    if completed not in ("true", "false") or value is None:
        raise EngineError(f"ScienceWorld returned an unexpected step result: {text[-120:]!r}")
    return (observation if observation not in ("", "null") else EMPTY_OBSERVATION), value, completed == "true"


def _parse_int_list(text: str) -> list[int]:
    """Parse a Java List's toString(), e.g. "[0, 1, 2]" (one transfer instead of one per element)."""
    inner = text.strip().strip("[]").strip()
    return [int(part) for part in inner.split(",")] if inner else []
