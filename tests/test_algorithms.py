"""`skillrise_train.algorithms`: one object per algorithm, the only place the trainer, the rollout and the
evaluation learn what an algorithm plays and how it credits (no `algo ==` checks elsewhere)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from skillrise_gym.sequences import TaskSequence
from skillrise_gym.tasks import Task
from skillrise_train.algorithms import ALGORITHMS, algorithm
from skillrise_train.config import ALGOS, TrainConfig

ROOT = Path(__file__).resolve().parent.parent


def sequences(n: int, K: int) -> list[TaskSequence]:
    return [TaskSequence(id=f"q{s}", family=f"f{s}", mode="cross",
                         tasks=tuple(Task(benchmark="toy", id=f"q{s}t{k}", family=f"f{s}", difficulty=0.0, split="train")
                                     for k in range(K))) for s in range(n)]


def test_the_flag_choices_are_the_registry():
    assert ALGOS == tuple(ALGORITHMS) == ("skillrise", "grpo", "gigpo", "lamer")
    for name in ALGOS:
        assert algorithm(name).name == name and name in TrainConfig.__dataclass_fields__["algo"].metadata["help"]
    with pytest.raises(ValueError, match="algo must be one of"):
        algorithm("ppo")


@pytest.mark.parametrize("name, per_sequence, episode", [
    ("skillrise", 2, {"K": 3, "mode": "cross"}),
    ("grpo", 6, {"K": 1, "mode": "cross"}),
    ("gigpo", 6, {"K": 1, "mode": "cross"}),
    ("lamer", 2, {"K": 3, "mode": "repeat", "carry": "reflect", "end_on_success": True}),
])
def test_each_algorithm_plans_its_trials_and_names_its_episode(name, per_sequence, episode):
    algo = algorithm(name)
    assert algo.episode(3) == episode
    plans = algo.plan(sequences(2, 3), G=2, tag="step0")
    assert len(plans) == 2 * per_sequence == 2 * algo.trials_per_sequence(3, 2)
    assert len({p.trial_id for p in plans}) == len(plans)
    for plan in plans:  # a group is G trials of the same tasks
        group = [p for p in plans if p.group_id == plan.group_id]
        assert len(group) == 2 and all(p.task_ids == plan.task_ids for p in group)
    if algo.whole_sequences:
        assert all(len(p.task_ids) == 3 and p.position_offset == 0 for p in plans)
    else:
        assert sorted({(p.sequence_index, p.position_offset) for p in plans}) == [(s, j) for s in range(2) for j in range(3)]


def test_no_module_compares_the_algorithm_name_outside_the_registry():
    """Adding an algorithm is one class in algorithms.py: nothing else branches on `algo ==` / `algo in`."""
    offenders = []
    for package in ("skillrise_train", "skillrise_gym"):
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "algorithms.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Compare):
                    names = [n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", None)
                             for n in [node.left, *node.comparators]]
                    if "algo" in names:
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders
