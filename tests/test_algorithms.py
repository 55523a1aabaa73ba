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


def test_the_base_is_abstract_and_every_algorithm_is_a_subclass():
    from skillrise_train.algorithms import Algorithm, SkillRise

    with pytest.raises(TypeError, match="abstract"):
        Algorithm()  # type: ignore[abstract]
    assert type(algorithm("skillrise")) is SkillRise
    assert all(isinstance(a, Algorithm) for a in ALGORITHMS.values())
    assert [a.name for a in ALGORITHMS.values() if a.writes_skills] == ["skillrise"]
    assert [a.name for a in ALGORITHMS.values() if a.reflects] == ["lamer"]


def _result_with_a_cut_turn():
    """Two trials of one group, one solve turn each at task 0; trial a solved it, trial b's turn was cut off."""
    from skillrise_gym.records import Turn
    from skillrise_train.samples import RolloutResult, TrialPlan, TurnSample

    sequence = sequences(1, 1)[0]
    samples = [TurnSample(Turn(role="solve", position=0, sequence_id="q0", trial_id=trial, task_id="q0t0",
                               family="f0", benchmark="toy", prompt="p", response="r", action="a", format_valid=True,
                               reward=float(trial == "a"), success=trial == "a", score=0.0, step_index=0,
                               extra={"group_id": "g", "completion_cut": trial == "b"}), [], [])
               for trial in ("a", "b")]
    plans = [TrialPlan(trial, "g", sequence, ["q0t0"]) for trial in ("a", "b")]
    return RolloutResult(samples=samples, task_rewards={"a": [10.0], "b": [0.0]},
                         success={"a": [True], "b": [False]}, plans=plans)


@pytest.mark.parametrize("name", ALGOS)
def test_every_algorithms_credit_subtracts_the_overlong_penalty_from_cut_turns_only(name):
    result = _result_with_a_cut_turn()
    plain = algorithm(name).credit(result, TrainConfig(env="toy", algo=name))
    penalised = algorithm(name).credit(result, TrainConfig(env="toy", algo=name, overlong_penalty=1.5))
    assert list(penalised[0]) == list(plain[0])  # returns unchanged
    assert list(penalised[1]) == [plain[1][0], plain[1][1] - 1.5]
    assert list(plain[1]) == list(algorithm(name).credit_rule(result, TrainConfig(env="toy", algo=name))[1])


def test_the_repetition_penalty_hits_curate_turns_whose_document_repeats_a_clause_only():
    """--repetition-penalty: subtracted from a curate turn whose document states one clause twice (case and
    spacing aside), not from one that states two clauses, nor from a solve turn that repeats itself; the
    share of such curate turns is logged as repeats/curate."""
    import dataclasses

    from skillrise_gym.documents import repeats_a_clause
    from skillrise_train.samples import rollout_stats

    assert repeats_a_clause("glass items go in the red bin; Glass items  go in the red bin")
    assert not repeats_a_clause("glass items go in the red bin; wood items go in the blue bin")
    result = _result_with_a_cut_turn()
    responses = ["<skill>glass items go in the red bin; glass items go in the red bin</skill>",
                 "<skill>glass items go in the red bin; wood items go in the blue bin</skill>"]
    result.samples = [dataclasses.replace(s, turn=dataclasses.replace(s.turn, role="curate", response=r,
                                                                      extra={"group_id": "g"}))
                      for s, r in zip(result.samples, responses)]
    solve = dataclasses.replace(result.samples[0], turn=dataclasses.replace(result.samples[0].turn, role="solve",
                                                                            response="red bin; red bin"))
    result.samples.append(solve)
    config = TrainConfig(env="toy", algo="skillrise")
    plain = algorithm("skillrise").credit(result, config)[1]
    penalised = algorithm("skillrise").credit(result, dataclasses.replace(config, repetition_penalty=2.0))[1]
    assert list(penalised) == [plain[0] - 2.0, plain[1], plain[2]]
    assert rollout_stats(result, plain, 1)["repeats/curate"] == 0.5
    with pytest.raises(ValueError, match="repetition_penalty must be a finite number >= 0"):
        TrainConfig(env="toy", repetition_penalty=-1.0)


@pytest.mark.parametrize("name", ALGOS)
def test_a_group_of_one_is_refused_for_every_algorithm(name, capsys):
    from skillrise_train.cli import main

    assert main(["--env", "toy", "--algo", name, "--G", "1"]) == 2
    assert ("--G must be at least 2: group-relative advantages of a group of one are zero, so no turn would be "
            "trained; use --G 2 or more") in capsys.readouterr().err
    with pytest.raises(ValueError, match="--G must be at least 2"):
        TrainConfig(env="toy", algo=name, G=1)
    with pytest.raises(ValueError, match="G must be at least 1, got 0"):  # below one: the generic refusal
        TrainConfig(env="toy", algo=name, G=0)
