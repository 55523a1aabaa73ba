"""`SequenceEnv`: one Gymnasium episode = one sequence of K related tasks, with an evolving skill document.

Phase machine of an episode (K tasks)::

    reset -> SOLVE task 0 (engine steps) -> CURATE -> SOLVE task 1 -> CURATE -> ... -> SOLVE task K-1 -> end
                                                                         (+ CURATE after it if asked)

- SOLVE: the action is the model's answer; the engine gets the command `prompts.parse_action` reads from it
  (the inside of ``<action>...</action>``, else the text itself: one rule, stated there).
  A task ends on success, on the engine's own done, on an engine error, or after `max_task_steps` steps.
- CURATE: the action is the new skill document: the inside of ``<skill>...</skill>`` when present, else the
  whole text; control characters removed; cut to `skill_char_limit` characters. An empty document is kept
  as "" and shown to models as `prompts.EMPTY_SKILL_PLACEHOLDER`.
- Carry modes (what crosses from one task to the next; `prompts.CARRY_MODES`):
  ``skill`` (default): the CURATE turn above; ``none``: nothing (no curate turn, the document stays empty:
  the control for test-time scaling); ``reflect``: the between-task turn (role CURATE, prompt from
  `prompts.reflect_prompt`) writes one reflection inside ``<remark>...</remark>`` (raw text kept when the tags
  are missing); every reflection so far is shown to later solve prompts, and ``skill_document`` holds that
  rendered list (`prompts.render_experience`). ``info["carry"]`` names the mode on every step.
- Observations: role, position, num_tasks, task, observation, skill_document, admissible_actions, the rendered
  prompt, and answer_prefix (compact prompts: the opening tag that agents able to prefill put after the chat
  template's assistant header; `prompts.answer_prefix`).
- Reward: 1.0 on the SOLVE step that completes a task successfully, else 0.0 (curate steps: always 0).
  Credit assignment across tasks belongs to consumers (the trainer), not to the env.
- `terminated` becomes True after the K-th task (or its curate step), or with ``end_on_success`` after the
  first solved task; `truncated` is always False: the per-task step limit ends a task, not the episode.

Bad settings are refused when the env is made: K (1 to `MAX_K`), max_task_steps, skill_char_limit (>= 0) and
max_action_chars (>= 1) must be integers, never bools, else ValueError naming the keyword; reset options that
are not a dict (or None) raise TypeError.

Bad actions: a non-string raises TypeError; stepping before reset or after the end raises RuntimeError.
An empty solve command, or one longer than `max_action_chars`, is not sent to the engine: the step counts,
and the observation says why (``info["invalid_action"]``). An engine that dies (`EngineError`) ends the
task as a failure tagged ``info["engine_error"]``; the sequence goes on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from skillrise_gym import prompts
from skillrise_gym.backends import Backend, EngineError, backend_class, check_options
from skillrise_gym.sequences import MODES, SequenceSampler, TaskSequence
from skillrise_gym.spaces import TextList, TextSpace
from skillrise_gym.tasks import Task

ROLES, ROLE_SOLVE, ROLE_CURATE = prompts.ROLES, prompts.ROLE_SOLVE, prompts.ROLE_CURATE
MAX_ACTION_CHARS = 1000
TEXT_LIMIT = 1_000_000
#: the most tasks one sequence may hold (observation spaces are int64; no family comes near it)
MAX_K = 1_000_000
#: the largest per-task step limit accepted
MAX_TASK_STEPS = 1_000_000_000
RESET_OPTIONS = ("task_ids", "family", "skill_document", "order")
CARRY_MODES = prompts.CARRY_MODES


def _check_int(name: str, value: Any, low: int, high: int) -> None:
    """ValueError unless `value` is an integer (not a bool) in [low, high]: a `gym.make` keyword is refused
    when the env is made, in one line naming it."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not low <= value <= high:
        kind = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise ValueError(f"{name} must be {kind} (at most {high}), got {value!r}")


@dataclass
class TaskRecord:
    """What happened to one task of the current sequence."""

    position: int
    task: Task
    description: str = ""
    initial_observation: str = ""
    observation: str = ""
    history: list[prompts.Step] = field(default_factory=list)
    steps: int = 0
    success: bool = False
    score: float = 0.0
    engine_done: bool = False
    engine_error: str | None = None
    ended: bool = False

    def summary(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "task_id": self.task.id,
            "family": self.task.family,
            "success": self.success,
            "score": self.score,
            "steps": self.steps,
            "engine_error": self.engine_error,
        }


class SequenceEnv(gym.Env):
    """K related tasks of one benchmark played in order, alternating SOLVE and CURATE roles.

    Args:
        backend: a backend name ("alfworld", "webshop", "scienceworld", "toy") or a `Backend` instance.
        K: tasks per sequence.
        split: the backend's split to draw tasks from (default: its first split).
        mode: "cross" (K distinct tasks of one family, easy to hard) or "repeat" (one task K times).
        seed: seed used at the first `reset()` when none is given there.
        max_task_steps: per-task step limit (default: the backend's `default_max_task_steps`).
        family: draw only from this family.
        curate_after_last: also ask for a curate step after the K-th task.
        skill_char_limit: longest skill document kept (characters).
        admissible_actions: put the engine's admissible actions in observations (default: the backend's
            `admissible_by_default`; ScienceWorld's list is expensive and off by default).
        expert_in_info: put the backend expert's next action in `info["expert_action"]` on solve steps.
        attempt_in_info: when the next turn is a curate turn, put the attempt it curates in `info["attempt"]`
            (the task, its first observation, every (action, observation), success and score): what a
            memory method reads instead of parsing the curate prompt (`skillrise_gym.memory`).
        max_action_chars: longest solve command sent to the engine.
        carry: what crosses tasks: "skill" (the curated document), "none" (nothing, no curate turn) or
            "reflect" (a list of per-task reflections, LaMer-style).
        prompt_style: "full" (reason, then answer) or "compact" (answer only, short; for small models);
            default: the backend's `prompt_style`.
        end_on_success: end the episode at the first solved task, with no curate turn after it (LaMer's
            attempts, mode "repeat": a solved task is not attempted again; later positions are not played).
        backend_options: keyword arguments for the backend's constructor.
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 1}  # text: one frame per turn

    def __init__(
        self,
        backend: str | Backend = "toy",
        K: int = 3,
        split: str | None = None,
        mode: str = "cross",
        seed: int | None = None,
        max_task_steps: int | None = None,
        family: str | None = None,
        curate_after_last: bool = False,
        skill_char_limit: int = prompts.SKILL_CHAR_LIMIT,
        admissible_actions: bool | None = None,
        expert_in_info: bool = False,
        attempt_in_info: bool = False,
        max_action_chars: int = MAX_ACTION_CHARS,
        render_mode: str | None = None,
        backend_options: dict[str, Any] | None = None,
        carry: str = "skill",
        prompt_style: str | None = None,
        end_on_success: bool = False,
    ) -> None:
        if isinstance(backend, Backend):
            self._backend: Backend | None = backend
            self._backend_cls = type(backend)
        elif isinstance(backend, str):
            self._backend = None
            self._backend_cls = backend_class(backend)
        else:
            raise TypeError(f"backend must be a name or a Backend, got {type(backend).__name__}")
        if backend_options and not isinstance(backend_options, dict):
            raise TypeError("backend_options must be a dict of keyword arguments")
        if backend_options and isinstance(backend, str):
            check_options(self._backend_cls, backend_options)  # refused now, not at the first reset
        _check_int("K", K, 1, MAX_K)
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; known modes: {', '.join(MODES)}")
        split = self._backend_cls.canonical_split(self._backend_cls.splits[0] if split is None else split)
        if max_task_steps is not None:
            _check_int("max_task_steps", max_task_steps, 1, MAX_TASK_STEPS)
        _check_int("skill_char_limit", skill_char_limit, 0, TEXT_LIMIT)
        _check_int("max_action_chars", max_action_chars, 1, TEXT_LIMIT)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"unknown render_mode {render_mode!r}")
        self.benchmark = self._backend_cls.benchmark
        self.carry = prompts.check_carry(carry, self.benchmark)
        self.prompt_style = prompts.check_style(prompt_style or self._backend_cls.prompt_style)
        if carry == "none" and curate_after_last:
            raise ValueError("carry='none' has no curate turns, so curate_after_last cannot be set")
        self.K, self.split, self.mode, self.family = int(K), split, mode, family
        self.max_task_steps = int(max_task_steps or self._backend_cls.default_max_task_steps)
        self.curate_after_last = curate_after_last
        if not isinstance(end_on_success, bool):
            raise ValueError(f"end_on_success must be True or False, got {end_on_success!r}")
        self.end_on_success = end_on_success
        self.skill_char_limit = int(skill_char_limit)
        # carry "reflect" shows up to K reflections of skill_char_limit characters each, plus their headers
        document_limit = self.skill_char_limit if carry != "reflect" else self.K * (self.skill_char_limit + 200) + 100
        self.with_admissible = (
            self._backend_cls.admissible_by_default if admissible_actions is None else bool(admissible_actions)
        )
        self.expert_in_info = expert_in_info
        self.attempt_in_info = attempt_in_info
        self.max_action_chars = int(max_action_chars)
        self.render_mode = render_mode
        self._backend_options = dict(backend_options or {})
        self._initial_seed = seed
        self._seeded = False
        self._samplers: dict[str | None, SequenceSampler] = {}

        self.observation_space = spaces.Dict(
            {
                "role": spaces.Discrete(2),
                "position": spaces.Discrete(self.K),
                "num_tasks": spaces.Discrete(1, start=self.K),
                "task": TextSpace(TEXT_LIMIT),
                "observation": TextSpace(TEXT_LIMIT),
                "skill_document": TextSpace(max(document_limit, 1)),
                "admissible_actions": TextList(TextSpace(TEXT_LIMIT)),
                "prompt": TextSpace(4 * TEXT_LIMIT),
                "answer_prefix": TextSpace(64),
            }
        )
        self.action_space = TextSpace(TEXT_LIMIT)

        self.sequence: TaskSequence | None = None
        self.skill_document = ""
        self.reflections: list[prompts.Reflection] = []
        self.records: list[TaskRecord] = []
        self._role = ROLE_SOLVE
        self._position = 0
        self._done = True
        self._started = False

    # ----------------------------------------------------------------- backend and sequences
    @property
    def backend(self) -> Backend:
        """The engine, started on first use so that constructing the env stays cheap."""
        if self._backend is None:
            self._backend = self._backend_cls(**self._backend_options)
        return self._backend

    def sampler(self, family: str | None = None) -> SequenceSampler:
        family = family if family is not None else self.family
        if family not in self._samplers:
            tasks = self.backend.list_tasks(self.split)
            self._samplers[family] = SequenceSampler(tasks, self.K, self.mode, family=family)
        return self._samplers[family]

    # ----------------------------------------------------------------- gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start a new sequence.

        A new `seed` reseeds the env's RNG, also in the middle of an episode (the unfinished sequence is
        abandoned: ``info["abandoned_sequence"]`` names it). Options:
            task_ids: play exactly these K task ids of the split, in this order.
            order: with task_ids, sort them easy to hard first.
            family: draw this sequence from one family.
            skill_document: start from this document instead of an empty one.
        """
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"reset options must be a dict or None, got {type(options).__name__}")
        options = dict(options or {})
        unknown = set(options) - set(RESET_OPTIONS)
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; known: {', '.join(RESET_OPTIONS)}")
        if seed is None and not self._seeded:
            seed = self._initial_seed
        super().reset(seed=seed)
        self._seeded = True
        abandoned = self.sequence.id if (self.sequence is not None and not self._done) else None

        if "task_ids" in options:
            sequence = self.sampler().pinned(list(options["task_ids"]), order=bool(options.get("order")))
            if sequence.K != self.K:
                raise ValueError(f"task_ids has {sequence.K} tasks but this env plays K={self.K}")
        else:
            sequence = self.sampler(options.get("family")).draw(self.np_random)
        document = options.get("skill_document", "")
        if not isinstance(document, str):
            raise TypeError("skill_document must be a str")
        if document and self.carry != "skill":
            raise ValueError(f"a starting skill_document needs carry='skill' (this env carries {self.carry!r})")

        self.sequence = sequence
        self.skill_document = prompts.clean_text(document)[: self.skill_char_limit]
        self.reflections = []
        if self.carry == "reflect":
            self.skill_document = prompts.render_experience(self.reflections)
        self.records = []
        self._position, self._done, self._started = 0, False, True
        self._start_task(0)
        info = {
            "sequence_id": sequence.id,
            "family": sequence.family,
            "mode": sequence.mode,
            "task_ids": [t.id for t in sequence.tasks],
            **self._tags(),
        }
        if abandoned:
            info["abandoned_sequence"] = abandoned
        if self._done:  # every task failed to load (K=1, or carry none): nothing to play, the sequence is over
            info["sequence_done"] = True
            info["summary"] = self.summary()
            return self._observation(), info
        if self.expert_in_info and self._role == ROLE_SOLVE:
            info["expert_action"] = self._expert_action()
        if self.attempt_in_info and self._role == ROLE_CURATE:  # the first task failed to load
            info["attempt"] = self.attempt()
        return self._observation(), info

    def step(self, action: str):
        if not self._started:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the sequence has ended; call reset() to start a new one")
        if not isinstance(action, str):
            raise TypeError(f"actions are text: expected str, got {type(action).__name__}")
        if self._role == ROLE_SOLVE:
            reward, info = self._solve_step(action)
        else:
            reward, info = 0.0, self._curate_step(action)
        if self._done:
            info["summary"] = self.summary()
        if self.expert_in_info and self._role == ROLE_SOLVE and not self._done:
            info["expert_action"] = self._expert_action()
        if self.attempt_in_info and self._role == ROLE_CURATE and not self._done:
            info["attempt"] = self.attempt()
        return self._observation(), reward, self._done, False, info

    def render(self) -> str | None:
        if self.render_mode is None or not self._started:
            return None
        text = self._prompt()
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
        super().close()

    # ----------------------------------------------------------------- phases
    def _start_task(self, position: int) -> None:
        task = self.sequence.tasks[position]
        record = TaskRecord(position=position, task=task)
        self.records.append(record)
        self._role = ROLE_SOLVE
        try:
            first = self.backend.reset(task)
            record.description = self.backend.task_description()
        except EngineError as exc:
            record.observation = f"Engine error while loading the task: {exc}"
            record.engine_error = str(exc)
            self._end_task(record)
            return
        record.initial_observation = record.observation = prompts.clean_text(first.observation)
        record.score = float(first.score)

    def _solve_step(self, text: str) -> tuple[float, dict[str, Any]]:
        record = self.records[-1]
        parsed = prompts.parse_action(text, self.benchmark)
        command = parsed.action
        invalid = None
        if not command:
            invalid = "empty"
        elif len(command) > self.max_action_chars:
            invalid = "too_long"
        reward = 0.0
        info: dict[str, Any] = {}
        if invalid:
            observation = (
                "Invalid action: the command was empty."
                if invalid == "empty"
                else f"Invalid action: the command is longer than {self.max_action_chars} characters."
            )
            info["invalid_action"] = invalid
            record.history.append(prompts.Step(command[:200], observation))
        else:
            try:
                result = self.backend.step(command)
            except EngineError as exc:
                record.engine_error = str(exc)
                observation = f"Engine error: {exc}"
            else:
                observation = prompts.clean_text(result.observation)
                was_success = record.success
                record.success = record.success or bool(result.success)
                record.score = float(result.score)
                record.engine_done = bool(result.done)
                reward = 1.0 if record.success and not was_success else 0.0
                info["engine_info"] = result.info
            record.history.append(prompts.Step(command, observation))
        record.steps += 1
        record.observation = observation
        ended = (
            record.success or record.engine_done or record.engine_error is not None
            or record.steps >= self.max_task_steps
        )
        info.update(self._tags(role=ROLE_SOLVE, record=record))
        info.update(action=command, format_valid=parsed.valid, task_done=ended,
                    engine_done=record.engine_done, engine_error=record.engine_error)
        if ended:
            self._end_task(record)
            info["next_role"] = None if self._done else ROLES[self._role]
        return reward, info

    def _end_task(self, record: TaskRecord) -> None:
        record.ended = True
        last = record.position == self.K - 1
        if self.end_on_success and record.success:  # solved: nothing left to attempt (LaMer)
            self._done = True
        elif self.carry == "none":
            if last:
                self._done = True
            else:  # nothing to carry: the next task starts at once
                self._position += 1
                self._start_task(self._position)
        elif last and not self.curate_after_last:
            self._done = True
        else:
            self._role = ROLE_CURATE

    def _curate_step(self, text: str) -> dict[str, Any]:
        record = self.records[-1]
        if self.carry == "reflect":
            parsed = prompts.parse_reflection(text, self.skill_char_limit)
            self.reflections.append(
                prompts.Reflection(record.position, record.task.family, record.success, parsed.document)
            )
            self.skill_document = prompts.render_experience(self.reflections)
        else:
            parsed = prompts.parse_skill(text, self.skill_char_limit)
            self.skill_document = parsed.document
        info = self._tags(role=ROLE_CURATE, record=record)
        info.update(action=parsed.document, format_valid=parsed.valid, task_done=False,
                    engine_done=record.engine_done, engine_error=record.engine_error)
        if record.position == self.K - 1:
            self._done = True
        else:
            self._position += 1
            self._start_task(self._position)
        return info

    # ----------------------------------------------------------------- views
    def _tags(self, role: int | None = None, record: TaskRecord | None = None) -> dict[str, Any]:
        record = record or self.records[-1]
        return {
            "role": ROLES[self._role if role is None else role],
            "position": record.position,
            "task_id": record.task.id,
            "family": record.task.family,
            "sequence_id": self.sequence.id,
            "success": record.success,
            "score": record.score,
            "step_index": record.steps,
            "next_role": None if self._done else ROLES[self._role],
            "carry": self.carry,
        }

    def summary(self) -> dict[str, Any]:
        """Per-position results of the current sequence."""
        tasks = [r.summary() for r in self.records]
        return {
            "sequence_id": self.sequence.id,
            "family": self.sequence.family,
            "mode": self.sequence.mode,
            "carry": self.carry,
            "tasks": tasks,
            "success": [t["success"] for t in tasks],
        }

    def _expert_action(self) -> str | None:
        return self.backend.expert_action()

    def _prompt(self, admissible: tuple[str, ...] | None = None) -> str:
        record = self.records[-1]
        if self._role == ROLE_CURATE and self.carry == "reflect":
            return prompts.reflect_prompt(
                self.benchmark, task=record.description, history=record.history, success=record.success,
                style=self.prompt_style,
            )
        if self._role == ROLE_CURATE:
            return prompts.curate_prompt(
                self.benchmark, skill_document=self.skill_document, task=record.description,
                history=record.history, success=record.success, style=self.prompt_style,
            )
        admissible = self._admissible() if admissible is None else admissible
        return prompts.solve_prompt(
            self.benchmark, skill_document=self.skill_document, task=record.description,
            observation=record.observation, history=record.history, admissible_actions=admissible,
            action_grammar=None if admissible else self.backend.action_grammar(), style=self.prompt_style,
            carry=self.carry,
        )

    def _admissible(self) -> tuple[str, ...]:
        if not self.with_admissible or self._role != ROLE_SOLVE or self.records[-1].ended:
            return ()
        try:
            return tuple(self.backend.admissible_actions() or ())
        except EngineError:
            return ()

    def _observation(self) -> dict[str, Any]:
        record = self.records[-1]
        admissible = self._admissible()
        return {
            "role": np.int64(self._role),
            "position": np.int64(record.position),
            "num_tasks": np.int64(self.K),
            "task": record.description,
            "observation": record.observation,
            "skill_document": self.skill_document,
            "admissible_actions": admissible,
            "prompt": self._prompt(admissible),
            "answer_prefix": prompts.answer_prefix(ROLES[self._role], self.prompt_style, self.carry),
        }

    def attempt(self) -> dict[str, Any]:
        """The task just attempted, as a curate turn curates it: its position, family, goal, first
        observation, every (action, observation) in order, success, score and engine error."""
        record = self.records[-1]
        return {"position": record.position, "family": record.task.family, "task_id": record.task.id,
                "task": record.description, "initial_observation": record.initial_observation,
                "trajectory": [[step.action, step.observation] for step in record.history],
                "success": bool(record.success), "score": float(record.score), "engine_error": record.engine_error}

    # convenience for scripted agents that share the process with the env
    def expert_action(self) -> str | None:
        """The backend expert's next command in the SOLVE role, None in the CURATE role."""
        if self._done or self._role != ROLE_SOLVE:
            return None
        return self._expert_action()

    @property
    def role(self) -> str:
        return ROLES[self._role]

    @property
    def position(self) -> int:
        return self._position
