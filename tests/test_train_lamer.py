"""LaMer as a training algorithm (`--algo lamer`, credit.py's `lamer_credit`): K attempts at one task, a
reflection after each failed attempt, the trial ending at the first success; solve turns of attempt n get
G_n = r_n + gamma G_{n+1}, the reflection after attempt n gets G_{n+1}; advantages per (group, attempt,
role). Credit proven by hand; the rollout plays repeat sequences with reflections and stops at a success;
the env's end_on_success; what --algo lamer cannot use is refused with the reason."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

from skillrise_gym.env import SequenceEnv
from skillrise_train.config import TrainConfig
from skillrise_train.credit import CURATE, SOLVE, TurnTag, lamer_credit, lamer_returns
from skillrise_train.rollout import RolloutEngine
from skillrise_train.samples import Completion
from skillrise_train.rollout_setup import RolloutConfig

K, G, S = 3, 2, 3


def test_lamer_credit_by_hand():
    """Two trials of one task, gamma 0.6, success_reward 10. Trial a fails attempt 0 and solves attempt 1 (so
    attempt 2 is never played): r = (0, 10, 0). Trial b fails all three: r = (0, 0, 0).
    a: solve@0: 0 + 0.6*10 = 6; reflection after 0: G_1 = 10; solve@1: 10 (no reflection after a success)
    b: every return 0. Advantages (mean_norm, per (group, attempt, role), one value per trial):
    solve@0: 6 - 3 = 3 / -3; reflect@0: 10 - 5 = 5 / -5; solve@1: 10 - 5 = 5 / -5; reflect@1 (b only): 0;
    solve@2 (b only): 0; b's second solve turn at attempt 0 has the same return and advantage as its first;
    a turn without its tags loses the penalty 0.5."""
    tags = [
        TurnTag("a", "g", SOLVE, 0), TurnTag("a", "g", CURATE, 0), TurnTag("a", "g", SOLVE, 1, format_valid=False),
        TurnTag("b", "g", SOLVE, 0), TurnTag("b", "g", SOLVE, 0, step=1), TurnTag("b", "g", CURATE, 0),
        TurnTag("b", "g", SOLVE, 1), TurnTag("b", "g", CURATE, 1), TurnTag("b", "g", SOLVE, 2),
    ]
    rewards = {"a": [0.0, 10.0, 0.0], "b": [0.0, 0.0, 0.0]}
    returns, advantages = lamer_credit(tags, rewards, gamma=0.6, invalid_penalty=0.5)
    np.testing.assert_allclose(returns, [6, 10, 10, 0, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(advantages, [3, 5, 5 - 0.5, -3, -3, -5, -5, 0, 0])
    # three attempts, all solved (a success on every attempt, were they all played): 10 + 6 + 3.6
    np.testing.assert_allclose(lamer_returns([TurnTag("c", "h", SOLVE, 0), TurnTag("c", "h", CURATE, 0)],
                                             {"c": [10.0, 10.0, 10.0]}, gamma=0.6), [19.6, 16.0])
    with pytest.raises(ValueError, match="gamma"):
        lamer_returns(tags, rewards, gamma=1.5)


def test_end_on_success_ends_the_episode_at_the_first_solved_attempt():
    env = SequenceEnv("toy", K=3, mode="repeat", carry="reflect", end_on_success=True, expert_in_info=True)
    obs, info = env.reset(seed=3)
    task = info["task_id"]
    # attempt 0 fails on purpose (an unknown command until the step limit), then a reflection
    terminated, steps = False, 0
    while obs["role"] == 0 and not terminated:
        obs, reward, terminated, _, info = env.step("<action>press nothing</action>")
        steps += 1
        assert reward == 0.0
    assert not terminated and obs["role"] == 1 and steps == env.max_task_steps
    obs, reward, terminated, _, info = env.step("<remark>press the switches the task names, in order</remark>")
    assert obs["position"] == 1 and info["task_id"] == task and "press the switches" in obs["skill_document"]
    while not terminated:  # attempt 1: the expert solves it; the episode ends there, no reflection
        obs, reward, terminated, _, info = env.step(f"<action>{info['expert_action']}</action>")
    assert reward == 1.0 and info["success"] and info["position"] == 1
    assert [r.success for r in env.records] == [False, True]  # attempt 2 never played
    with pytest.raises(RuntimeError):
        env.step("<action>press red switch</action>")
    with pytest.raises(ValueError, match="end_on_success"):
        SequenceEnv("toy", K=2, end_on_success="yes")
    env.close()


def _answer(prompt: str) -> str:
    """Deterministic and varied: a reflection for reflect prompts; else one of the task's switches picked by
    the prompt's checksum (some attempts solve, some do not); one in seven without tags."""
    pick = zlib.crc32(prompt.encode())
    if "<remark>" in prompt:
        return f"<remark>try switch {pick % 5}</remark>"
    if pick % 7 == 0:
        return "no tags here"
    task = prompt.split("Your task is to: press ", 1)[1].split(".\n", 1)[0]
    switches = task.split(", then ")
    return f"<action>press {switches[pick % len(switches)]}</action>"


def _generate(prompts, prefixes, seeds=None):
    return [Completion([zlib.crc32(p.encode()) % 1000], [len(p) % 7], pre + _answer(p))
            for p, pre in zip(prompts, prefixes)]


@pytest.fixture(scope="module")
def lamer_rollout():
    outcomes = {}
    for envs in (1, 4):
        rollout = RolloutEngine(RolloutConfig("toy", "lamer", K=K, G=G, S=S, max_task_steps=3, seed=9, envs=envs))
        try:
            plans = rollout.plan(rollout.sequences(0, S), tag="step0")
            result = rollout.play(plans, _generate, step=0)
        finally:
            rollout.close()
        outcomes[envs] = (plans, result)
    return outcomes


def test_the_lamer_rollout_plays_attempts_with_reflections_and_stops_at_a_success(lamer_rollout):
    plans, result = lamer_rollout[4]
    assert len(plans) == S * G and all(len(set(p.task_ids)) == 1 and len(p.task_ids) == K for p in plans)
    by_trial: dict[str, list] = {}
    for sample in result.samples:
        by_trial.setdefault(sample.turn.trial_id, []).append(sample)
    solved_somewhere = failed_everywhere = 0
    for plan in plans:
        samples = by_trial[plan.trial_id]
        assert {s.turn.task_id for s in samples} == {plan.task_ids[0]}  # one task, attempted again
        rewards = result.task_rewards[plan.trial_id]
        first = next((n for n, r in enumerate(rewards) if r > 0), None)
        played = {s.turn.position for s in samples if s.turn.role == "solve"}
        reflected = sorted(s.turn.position for s in samples if s.turn.role == "curate")
        if first is None:
            failed_everywhere += 1
            assert played == set(range(K)) and reflected == list(range(K - 1))
        else:
            solved_somewhere += 1
            assert played == set(range(first + 1)) and reflected == list(range(first))  # none after the success
            assert all(r == 0 for r in rewards[first + 1:])
        for s in samples:
            if s.turn.role == "curate":
                assert "<remark>" in s.turn.prompt and "<skill>" not in s.turn.prompt
    assert solved_somewhere and failed_everywhere  # the probe covers both kinds of trial
    assert any(result.task_rewards[p.trial_id][0] == 0 and max(result.task_rewards[p.trial_id]) > 0 for p in plans), \
        "no trial solved a later attempt after failing the first"
    # the credit the trainer computes, recomputed here from the rewards by the formula
    tags = result.tags(10.0)
    returns, _ = lamer_credit(tags, result.task_rewards, gamma=0.6)
    for tag, value in zip(tags, returns):
        r = result.task_rewards[tag.trial]
        start = tag.position if tag.role == "solve" else tag.position + 1
        assert value == pytest.approx(sum(0.6 ** (m - start) * r[m] for m in range(start, K)))


def test_the_lamer_rollout_is_the_same_for_any_number_of_envs(lamer_rollout):
    def turns(result):
        return [(s.turn.trial_id, s.turn.position, s.turn.role, s.turn.prompt, s.turn.response, s.turn.reward)
                for s in result.samples]

    assert turns(lamer_rollout[1][1]) == turns(lamer_rollout[4][1])
    assert lamer_rollout[1][1].task_rewards == lamer_rollout[4][1].task_rewards


@pytest.mark.parametrize("flags, message", [
    ({"K": 1}, "K must be at least 2"),
    ({"curate_credit": "own"}, "curate-credit"),
    ({"warmstart_steps": 10, "warmstart_documents": "several"}, "reflections are one"),
])
def test_what_lamer_cannot_use_is_refused(flags, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(env="toy", algo="lamer", **{"K": 2, **flags})


def test_the_cli_refuses_it_in_one_line(capsys):
    from skillrise_train.cli import main

    assert main(["--env", "toy", "--algo", "lamer", "--K", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "K must be at least 2" in err[0]


def test_one_lamer_training_step_with_evaluation(tmp_path):
    """The trainer end to end on the tiny model: repeat episodes with reflections, recorded turns carrying
    LaMer's returns, evaluation in repeat mode with Pass@k."""
    from skillrise_train.cli import main

    out = tmp_path / "run"
    code = main(["--env", "toy", "--algo", "lamer", "--model", "tiny", "--K", "2", "--G", "2", "--S", "2",
                 "--steps", "1", "--max-task-steps", "2", "--max-new-tokens", "8", "--eval-interval", "1",
                 "--eval-sequences", "2", "--output-dir", str(out)])
    assert code == 0
    turns = [json.loads(line) for line in (out / "turns.jsonl").read_text().splitlines()]
    assert turns and all(t["extra"]["algo"] == "lamer" for t in turns)
    by_trial: dict[str, set] = {}
    for t in turns:
        by_trial.setdefault(t["trial_id"], set()).add(t["task_id"])
    assert all(len(ids) == 1 for ids in by_trial.values())  # one task per trial, attempted again
    assert any(t["role"] == "curate" and "<remark>" in t["prompt"] for t in turns)
    evaluation = json.loads((out / "eval.jsonl").read_text().splitlines()[-1])
    assert len(evaluation["pass_at_k"]) == 2 and len(evaluation["success_by_position"]) == 2


def test_the_warm_start_teaches_reflections_for_lamer():
    """With --algo lamer the format warm start plays the run's own episodes (attempts at one task): its
    between-attempt targets are <remark> reflections of one trajectory clause, on reflect prompts."""
    from skillrise_train.algorithms import algorithm
    from skillrise_train.warmstart import format_examples

    env = SequenceEnv("toy", max_task_steps=2, **algorithm("lamer").episode(3))
    try:
        examples = format_examples(env, 6, seed=0)
    finally:
        env.close()
    reflections = [ex for ex in examples if "<remark>" in ex.prompt]
    assert reflections and all(ex.target.startswith("<remark>") and ex.target.endswith("</remark>")
                               for ex in reflections)
    assert not any("<skill>" in ex.target for ex in examples)
    # reading: the attempt after a reflection that names an action, that action as the target
    from skillrise_gym.prompts import action_answer
    from skillrise_train.warmstart import named_action, reflection_reading_examples

    env = SequenceEnv("toy", max_task_steps=2, **algorithm("lamer").episode(3))
    try:
        obs, info = env.reset(seed=1)
        actions = list(obs["admissible_actions"])
        clauses = ["press old red switch", "press square green switch", "Nothing happens"]
        reading = reflection_reading_examples(env, info["task_ids"], clauses, 6, np.random.default_rng(0))
    finally:
        env.close()
    assert len(reading) == 6
    for ex in reading:
        assert ex.prompt.count("you noted:") == 1
        note = ex.prompt.split("you noted:", 1)[1].split("\n", 1)[0].strip()
        assert note in clauses[:2] and ex.target == action_answer(named_action(actions, note))


def test_the_transfer_experiment_runs_the_lamer_arm_with_repeat_mode(tmp_path, transfer_experiment):
    """benchmarks/experiments/transfer_experiment.py --arms lamer --repeat-k 2 --feedback success at toy sizes:
    LaMer starts from its own warm start (reflections), and every policy gets Pass@k in repeat mode beside the
    cross table."""
    module = transfer_experiment
    results = tmp_path / "results"
    code = module.main(["--arms", "lamer", "--feedback", "success", "--bins", "4", "--K", "2", "--repeat-k", "2",
                        "--eval-K", "2", "--steps", "1", "--warmstart-steps", "5", "--warmstart-sequences", "5",
                        "--eval-sequences", "4", "--G", "2", "--S", "1", "--no-untrained",
                        "--work-dir", str(tmp_path / "work"), "--results-dir", str(results)])
    assert code == 0
    report = json.loads((results / "transfer_experiment.json").read_text())
    assert (tmp_path / "work" / "untrained-lamer").is_dir()
    repeat = report["evaluations"]["lamer"]["repeat"]
    assert set(repeat) == {"skill", "reflect"} and len(repeat["reflect"]["pass_at_k"]) == 2
    assert report["ceilings"]["explore_pass_at_k"] == [0.25, 0.5]
    assert "Repeat mode" in (results / "transfer_experiment.md").read_text()
