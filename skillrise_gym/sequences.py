"""Task sequences: group tasks by family, order them easy to hard, draw K-task sequences reproducibly.

Modes:
- ``cross``: K distinct tasks of one family, sorted by (difficulty, id): the method's setting.
- ``repeat``: one task K times (Pass@k evaluation).

Draws are reproducible across processes and machines: the n-th sequence of seed s is drawn from
``numpy.random.default_rng([s, n])`` (or from the RNG a caller hands in), over families and tasks kept
in a sorted, hash-seed-independent order.

Families smaller than K (cross mode): skipped. A family with fewer than K distinct tasks cannot make a
cross sequence without repeating a task, which would mix the repeat setting into the cross one; such
families are left out of random draws, and asking for one explicitly (``family=...``) raises ValueError.
If no family has K tasks, constructing the sampler raises ValueError.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from skillrise_gym.tasks import Task

MODES = ("cross", "repeat")


@dataclass(frozen=True)
class TaskSequence:
    """K tasks played in order within one episode."""

    id: str
    family: str
    mode: str
    tasks: tuple[Task, ...]

    @property
    def K(self) -> int:
        return len(self.tasks)

    @staticmethod
    def make(tasks: Sequence[Task], mode: str) -> "TaskSequence":
        return TaskSequence(id=sequence_id(tasks, mode), family=tasks[0].family, mode=mode, tasks=tuple(tasks))

    def to_dict(self) -> dict:
        return {"id": self.id, "family": self.family, "mode": self.mode, "tasks": [t.to_dict() for t in self.tasks]}

    @classmethod
    def from_dict(cls, data: dict) -> "TaskSequence":
        return cls(id=data["id"], family=data["family"], mode=data["mode"],
                   tasks=tuple(Task.from_dict(t) for t in data["tasks"]))


def sequence_id(tasks: Sequence[Task], mode: str) -> str:
    """A stable id: benchmark, split, mode and a digest of the ordered task ids."""
    first = tasks[0]
    digest = hashlib.sha1(json.dumps([t.id for t in tasks]).encode()).hexdigest()[:12]
    return f"{first.benchmark}:{first.split}:{mode}:K{len(tasks)}:{digest}"


def order_easy_to_hard(tasks: Iterable[Task]) -> list[Task]:
    return sorted(tasks, key=lambda t: (t.difficulty, t.id))


class SequenceSampler:
    """Draws K-task sequences from the tasks of one split."""

    def __init__(self, tasks: Sequence[Task], K: int, mode: str = "cross", family: str | None = None) -> None:
        if not isinstance(K, (int, np.integer)) or isinstance(K, bool) or K < 1:
            raise ValueError(f"K must be a positive integer, got {K!r}")
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; known modes: {', '.join(MODES)}")
        if not tasks:
            raise ValueError("no tasks to draw sequences from")
        self.K, self.mode = int(K), mode
        groups: dict[str, list[Task]] = defaultdict(list)
        for task in tasks:
            groups[task.family].append(task)
        self.all_families = {name: order_easy_to_hard(group) for name, group in sorted(groups.items())}
        if family is not None and family not in self.all_families:
            raise ValueError(f"unknown family {family!r}; known families: {', '.join(self.all_families)}")
        usable = {n: g for n, g in self.all_families.items() if mode == "repeat" or len(g) >= self.K}
        if family is not None:
            if family not in usable:
                raise ValueError(f"family {family!r} has {len(self.all_families[family])} tasks, fewer than K={K}")
            usable = {family: usable[family]}
        if not usable:
            largest = max(len(g) for g in self.all_families.values())
            raise ValueError(f"K={K} is larger than every family (the largest has {largest} tasks)")
        self.families = usable
        self._names = list(usable)
        sizes = np.array([len(usable[n]) for n in self._names], dtype=float)
        # Families are drawn in proportion to their size, as in the reference (natural proportions).
        self._family_weights = sizes / sizes.sum()
        self._by_id = {t.id: t for g in self.all_families.values() for t in g}

    def draw(self, rng: np.random.Generator) -> TaskSequence:
        """One sequence drawn with `rng`."""
        name = self._names[int(rng.choice(len(self._names), p=self._family_weights))]
        group = self.families[name]
        if self.mode == "repeat":
            return TaskSequence.make([group[int(rng.integers(len(group)))]] * self.K, "repeat")
        picks = sorted(int(i) for i in rng.choice(len(group), size=self.K, replace=False))
        return TaskSequence.make([group[i] for i in picks], "cross")  # group is sorted: picks stay easy->hard

    def sequence(self, seed: int, index: int) -> TaskSequence:
        """The `index`-th sequence of `seed`: the same in any process, on any machine."""
        return self.draw(np.random.default_rng([int(seed), int(index)]))

    def sequences(self, n: int, seed: int) -> list[TaskSequence]:
        return [self.sequence(seed, i) for i in range(n)]

    def pinned(self, task_ids: Sequence[str], order: bool = False) -> TaskSequence:
        """A sequence of the given task ids, in the given order (or sorted easy to hard with `order`)."""
        if isinstance(task_ids, str) or not task_ids:
            raise ValueError("task_ids must be a non-empty list of task ids")
        unknown = [t for t in task_ids if t not in self._by_id]
        if unknown:
            raise ValueError(f"unknown task id(s) {unknown[:5]} (of {len(self._by_id)} tasks in this split)")
        tasks = [self._by_id[t] for t in task_ids]
        if order:
            tasks = order_easy_to_hard(tasks)
        mode = "repeat" if len({t.id for t in tasks}) == 1 and len(tasks) > 1 else "cross"
        return TaskSequence.make(tasks, mode)
