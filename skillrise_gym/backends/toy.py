"""A tiny deterministic engine for unit-testing the layers above the backends (sequences, SequenceEnv,
agents, the trainer) and for debugging agent code without a real benchmark.

It is not a benchmark and no `gym` id is registered for it. A task is a room with numbered switches; the
goal names a colour; the agent must "press <colour> switch" for each switch listed in the goal, in
order. Families are colours, difficulty is the number of presses needed. Wrong commands answer
"Nothing happens." like ALFWorld. Task ids containing "crash" raise `EngineError` on their second step,
to test engine-failure handling. `fail_to_load` names tasks whose reset fails, `hang_on` tasks whose first
step never returns (a hung engine, for the layers' timeouts).
"""

from __future__ import annotations

from typing import ClassVar

from skillrise_gym.backends.base import Backend, EngineError, StepResult
from skillrise_gym.tasks import Task

COLOURS = ("red", "green", "blue")
SHAPES = ("round", "square", "tall", "small", "big", "old")


class ToyBackend(Backend):
    benchmark: ClassVar[str] = "toy"
    splits: ClassVar[tuple[str, ...]] = ("train", "test")
    default_max_task_steps: ClassVar[int] = 8

    def __init__(self, tasks_per_family: int = 6, extra_tasks: list[Task] | None = None,
                 fail_to_load: list[str] | tuple[str, ...] = (), hang_on: list[str] | tuple[str, ...] = ()) -> None:
        self.tasks_per_family = tasks_per_family
        self.extra_tasks = list(extra_tasks or [])
        self.fail_to_load = set(fail_to_load)  # task ids whose reset raises EngineError
        self.hang_on = set(hang_on)  # task ids whose first step sleeps (almost) forever
        self._task: Task | None = None
        self._progress = 0
        self._steps = 0
        self.closed = False

    def list_tasks(self, split: str) -> list[Task]:
        self.check_split(split)
        offset = 0 if split == "train" else 100
        tasks = []
        for colour in COLOURS:
            for n in range(self.tasks_per_family):
                presses = 1 + (n % 3)
                shapes = [SHAPES[(n + k + offset) % len(SHAPES)] for k in range(presses)]
                tasks.append(
                    Task(
                        benchmark="toy",
                        id=f"{colour}-{split}-{n}",
                        family=colour,
                        difficulty=float(presses),
                        split=split,
                        payload={"colour": colour, "sequence": [f"press {s} {colour} switch" for s in shapes]},
                    )
                )
        return tasks + [t for t in self.extra_tasks if t.split == split]

    def reset(self, task: Task) -> StepResult:
        if self.closed:
            raise RuntimeError("ToyBackend is closed")
        if task.id in self.fail_to_load:
            raise EngineError(f"toy engine could not load task {task.id}")
        self._task, self._progress, self._steps = task, 0, 0
        return StepResult(observation=f"You are in a room full of switches. Your task is to: {self.task_description()}")

    def task_description(self) -> str:
        assert self._task is not None, "reset() first"
        return "press " + ", then ".join(a[len("press ") :] for a in self._task.payload["sequence"]) + "."

    def _needed(self) -> list[str]:
        assert self._task is not None, "reset() first"
        return list(self._task.payload["sequence"])

    def step(self, action: str) -> StepResult:
        needed = self._needed()
        self._steps += 1
        if self._task.id in self.hang_on:
            import time

            time.sleep(3600)
        if "crash" in self._task.id and self._steps >= 2:
            raise EngineError(f"toy engine crashed on task {self._task.id}")
        if self._progress < len(needed) and action.strip().lower() == needed[self._progress]:
            self._progress += 1
            won = self._progress == len(needed)
            obs = "Click. All switches are on. You won!" if won else "Click. A light turns on."
            return StepResult(observation=obs, score=float(won), done=won, success=won)
        return StepResult(observation="Nothing happens.")

    def admissible_actions(self) -> list[str]:
        colour = self._task.payload["colour"] if self._task else COLOURS[0]
        return ["look"] + [f"press {s} {c} switch" for c in (colour,) for s in SHAPES]

    def expert_action(self) -> str | None:
        needed = self._needed()
        return needed[self._progress] if self._progress < len(needed) else None

    def close(self) -> None:
        self.closed = True
