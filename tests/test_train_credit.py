"""Credit assignment and advantages against hand-computed cases (skillrise_train.credit)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from skillrise_train.credit import TurnTag, advantages, assign_credit, curate_return, group_statistics, turn_returns


def solve(trial, position, group="g", valid=True):
    return TurnTag(trial=trial, group=group, role="solve", position=position, format_valid=valid)


def curate(trial, position, group="g", valid=True):
    return TurnTag(trial=trial, group=group, role="curate", position=position, format_valid=valid)


def test_curate_return_k3_matches_the_reference_formula():
    rewards = [10.0, 0.0, 10.0]
    assert curate_return(rewards, 0, 0.6) == pytest.approx(0.6 * 0.0 + 0.36 * 10.0)
    assert curate_return(rewards, 1, 0.6) == pytest.approx(6.0)
    assert curate_return(rewards, 2, 0.6) == 0.0  # nothing comes after the last task
    assert curate_return([0.0, 10.0, 10.0], 0, 0.5) == pytest.approx(5.0 + 2.5)


def test_solve_turns_get_their_own_task_reward_only():
    tags = [solve("a", 0), solve("a", 0), curate("a", 0), solve("a", 1)]
    returns = turn_returns(tags, {"a": [0.0, 10.0]}, gamma=0.6)
    np.testing.assert_allclose(returns, [0.0, 0.0, 6.0, 10.0])


def test_k1_has_only_solve_turns_and_plain_group_baseline():
    tags = [solve("a", 0), solve("b", 0), solve("b", 0)]
    returns, adv = assign_credit(tags, {"a": [10.0], "b": [0.0]}, invalid_penalty=0.0)
    np.testing.assert_allclose(returns, [10.0, 0.0, 0.0])
    np.testing.assert_allclose(adv, [5.0, -5.0, -5.0])


def test_g1_singleton_groups_have_mean_zero():
    # one trial per group: mean 0, std 1 (the reference's convention), so the advantage is the return
    tags = [solve("a", 0), curate("a", 0), solve("a", 1, valid=False)]
    returns, adv = assign_credit(tags, {"a": [10.0, 10.0]}, gamma=0.6, invalid_penalty=0.5)
    np.testing.assert_allclose(returns, [10.0, 6.0, 10.0])
    np.testing.assert_allclose(adv, [10.0, 6.0, 9.5])
    _, adv_std = assign_credit(tags, {"a": [10.0, 10.0]}, mode="mean_std_norm", invalid_penalty=0.0)
    np.testing.assert_allclose(adv_std, [10.0 / (1 + 1e-6), 6.0 / (1 + 1e-6), 10.0 / (1 + 1e-6)])


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_equal_returns_give_zero_advantage_and_the_penalty_does_not_explode(mode):
    tags = [solve(t, 0, valid=(t != "c")) for t in "abcd"] + [curate(t, 0) for t in "abcd"] + [solve(t, 1) for t in "abcd"]
    rewards = {t: [10.0, 10.0] for t in "abcd"}
    _, adv = assign_credit(tags, rewards, mode=mode, invalid_penalty=0.5)
    expected = np.zeros(len(tags))
    expected[2] = -0.5  # the invalid turn: penalty after normalisation, not divided by std=0
    np.testing.assert_allclose(adv, expected, atol=1e-9)


def test_each_trial_counts_once_per_group_even_with_many_turns():
    # trial a solved task 0 after 3 turns, trial b failed in 1 turn: the mean is (10+0)/2, not (30+0)/4
    tags = [solve("a", 0), solve("a", 0), solve("a", 0), solve("b", 0)]
    stats = group_statistics(tags, np.array([10.0, 10.0, 10.0, 0.0]))
    mean, std, count = stats[("g", 0, "solve")]
    assert (mean, count) == (5.0, 2)
    assert std == pytest.approx(math.sqrt(50.0))
    _, adv = assign_credit(tags, {"a": [10.0], "b": [0.0]}, invalid_penalty=0.0)
    np.testing.assert_allclose(adv, [5.0, 5.0, 5.0, -5.0])


def test_mixed_roles_positions_and_groups_never_share_statistics():
    # two sequences (groups x, y), two trials each, K=2
    rewards = {"x1": [10.0, 10.0], "x2": [0.0, 0.0], "y1": [0.0, 10.0], "y2": [0.0, 0.0]}
    tags = []
    for trial in rewards:
        group = trial[0]
        tags += [solve(trial, 0, group), curate(trial, 0, group, valid=(trial != "y2")), solve(trial, 1, group)]
    returns, adv = assign_credit(tags, rewards, gamma=0.6, mode="mean_norm", invalid_penalty=0.5)
    # returns per trial: solve0, curate0 (= 0.6 r_1), solve1
    np.testing.assert_allclose(returns, [10, 6, 10, 0, 0, 0, 0, 6, 10, 0, 0, 0])
    np.testing.assert_allclose(
        adv,
        [
            5, 3, 5,  # x1: group x means are 5 (solve0), 3 (curate0), 5 (solve1)
            -5, -3, -5,  # x2
            0, 3, 5,  # y1: y's solve0 returns are all 0; curate0 mean 3; solve1 mean 5
            0, -3 - 0.5, -5,  # y2: its invalid curate turn pays the penalty
        ],
    )
    _, adv_std = assign_credit(tags, rewards, gamma=0.6, mode="mean_std_norm", invalid_penalty=0.0)
    # two trials with returns v and 0: std = v / sqrt(2), so the advantages are +-1/sqrt(2)
    s = 1 / math.sqrt(2)
    np.testing.assert_allclose(adv_std, [s, s, s, -s, -s, -s, 0, s, s, 0, -s, -s], atol=1e-6)


def test_grpo_baseline_groups_are_tasks():
    # the baseline's trials are single-task episodes (position 0 of their own episode), grouped per task
    tags = [solve("s/t0/g0", 0, "s/t0"), solve("s/t0/g1", 0, "s/t0"), solve("s/t1/g0", 0, "s/t1"),
            solve("s/t1/g1", 0, "s/t1")]
    rewards = {"s/t0/g0": [10.0], "s/t0/g1": [0.0], "s/t1/g0": [0.0], "s/t1/g1": [0.0]}
    _, adv = assign_credit(tags, rewards)
    np.testing.assert_allclose(adv, [5.0, -5.0, 0.0, 0.0])


def test_unknown_role_and_mode_are_rejected():
    with pytest.raises(ValueError):
        turn_returns([TurnTag("a", "g", "reflect", 0)], {"a": [0.0]}, 0.6)
    with pytest.raises(ValueError):
        advantages([solve("a", 0)], np.array([1.0]), mode="zscore")


# ---------------------------------------------------------------------------------------- curate credit ablations
def _two_trials():
    tags = [solve("a", 0), curate("a", 0), solve("a", 1), curate("a", 1), solve("a", 2),
            solve("b", 0), curate("b", 0), solve("b", 1), curate("b", 1), solve("b", 2)]
    rewards = {"a": [0.0, 10.0, 10.0], "b": [10.0, 0.0, 0.0]}
    return tags, rewards


def test_curate_credit_future_is_the_discounted_sum_of_later_rewards():
    tags, rewards = _two_trials()
    returns, adv = assign_credit(tags, rewards, gamma=0.6, curate_credit="future", invalid_penalty=0.0)
    # a: curate after 0 -> 0.6*10 + 0.36*10 = 9.6; after 1 -> 6; b: 0 and 0
    np.testing.assert_allclose(returns[[1, 3, 6, 8]], [9.6, 6.0, 0.0, 0.0])
    np.testing.assert_allclose(adv[[1, 6]], [4.8, -4.8])


def test_curate_credit_own_couples_the_document_to_its_own_task():
    tags, rewards = _two_trials()
    returns, adv = assign_credit(tags, rewards, gamma=0.6, curate_credit="own", invalid_penalty=0.0)
    np.testing.assert_allclose(returns[[1, 3, 6, 8]], [0.0, 10.0, 10.0, 0.0])
    np.testing.assert_allclose(adv[[1, 6]], [-5.0, 5.0])  # the opposite sign of the future credit here
    np.testing.assert_allclose(returns[[0, 2, 4]], [0.0, 10.0, 10.0])  # solve turns are unchanged


def test_curate_credit_none_trains_solve_turns_only():
    from skillrise_train.credit import trained_turns

    tags, rewards = _two_trials()
    kept = trained_turns(tags, "none")
    assert [tags[n].role for n in kept] == ["solve"] * 6
    assert trained_turns(tags, "future") == list(range(len(tags)))
    with pytest.raises(ValueError, match="unknown curate credit"):
        trained_turns(tags, "later")
    with pytest.raises(ValueError, match="unknown curate credit"):
        assign_credit(tags, rewards, curate_credit="later")


# ------------------------------------------------------------------------------------------ GiGPO
def step(trial, n, state, reward=0.0, group="t", valid=True):
    """Solve turn number `n` of `trial` (one task), in `state`, earning `reward`."""
    return TurnTag(trial=trial, group=group, role="solve", position=0, format_valid=valid, step=n, reward=reward,
                   anchor=state)


def test_step_returns_are_discounted_backwards_within_each_trial():
    from skillrise_train.credit import step_returns

    tags = [step("a", 0, "s0"), step("b", 0, "s0"), step("a", 1, "s1"), step("a", 2, "s2", 10.0), step("b", 1, "x")]
    assert step_returns(tags, 0.5).tolist() == [2.5, 0.0, 5.0, 10.0, 0.0]
    assert step_returns(tags, 1.0).tolist() == [10.0, 0.0, 10.0, 10.0, 0.0]
    with pytest.raises(ValueError, match="step_gamma"):
        step_returns(tags, 1.5)


def test_gigpo_by_hand_anchor_groups_of_sizes_1_2_and_g():
    """Three trials of one task (G=3). a: s0 -> s1 -> win (10); b: s0 -> s1 -> s2 (fails); c: s0 -> s3 (fails).
    Episode (mean_norm): returns 10, 0, 0 -> +20/3, -10/3, -10/3 on every step of the trial. Step returns
    (gamma 0.5): a: 5, 10; b: 0, 0, 0; c: 0, 0. Anchor groups: s0 {a 5, b 0, c 0} (size G), s1 {a 10, b 0}
    (size 2), s2 {b 0} and s3 {c 0} (size 1: step advantage 0)."""
    from skillrise_train.credit import gigpo_advantages

    tags = [step("a", 0, "s0"), step("b", 0, "s0"), step("c", 0, "s0"),
            step("a", 1, "s1", 10.0), step("b", 1, "s1"), step("c", 1, "s3"), step("b", 2, "s2")]
    rewards = {"a": [10.0], "b": [0.0], "c": [0.0]}
    returns, adv = gigpo_advantages(tags, rewards, step_gamma=0.5, mode="mean_norm", invalid_penalty=0.0)
    ep = {"a": 20 / 3, "b": -10 / 3, "c": -10 / 3}
    expected = [ep["a"] + 5 - 5 / 3, ep["b"] - 5 / 3, ep["c"] - 5 / 3, ep["a"] + 5, ep["b"] - 5, ep["c"], ep["b"]]
    assert returns.tolist() == [10.0, 0.0, 0.0, 10.0, 0.0, 0.0, 0.0]
    assert np.allclose(adv, expected)
    # the step weight scales only the step part; mean_std_norm divides each part by its own std
    _, half = gigpo_advantages(tags, rewards, step_gamma=0.5, step_weight=0.5, mode="mean_norm", invalid_penalty=0.0)
    assert np.allclose(half - np.array([ep[t.trial] for t in tags]), 0.5 * (np.array(expected) - [ep[t.trial] for t in tags]))
    _, std = gigpo_advantages(tags, rewards, step_gamma=0.5, mode="mean_std_norm", invalid_penalty=0.0)
    ep_std = np.std([10.0, 0.0, 0.0], ddof=1)
    s0_std, s1_std = np.std([5.0, 0.0, 0.0], ddof=1), np.std([10.0, 0.0], ddof=1)
    assert math.isclose(std[0], (10 - 10 / 3) / (ep_std + 1e-6) + (5 - 5 / 3) / (s0_std + 1e-6))
    assert math.isclose(std[4], (0 - 10 / 3) / (ep_std + 1e-6) + (0 - 5) / (s1_std + 1e-6))
    assert math.isclose(std[6], (0 - 10 / 3) / (ep_std + 1e-6))  # a state of one: no step part


def test_gigpo_is_grpo_when_no_state_repeats_and_zero_when_returns_are_equal():
    from skillrise_train.credit import gigpo_advantages

    unique = [step("a", 0, "sa", 10.0), step("b", 0, "sb"), step("c", 0, "sc", 10.0)]
    rewards = {"a": [10.0], "b": [0.0], "c": [10.0]}
    for mode in ("mean_norm", "mean_std_norm"):
        _, gigpo = gigpo_advantages(unique, rewards, mode=mode, invalid_penalty=0.5)
        _, grpo = assign_credit(unique, rewards, mode=mode, invalid_penalty=0.5)
        assert np.allclose(gigpo, grpo)
    same = [step("a", 0, "s", 10.0), step("b", 0, "s", 10.0)]
    _, adv = gigpo_advantages(same, {"a": [10.0], "b": [10.0]}, mode="mean_std_norm")
    assert np.allclose(adv, 0.0)  # equal returns: no advantage, and no division blow-up
    invalid = [step("a", 0, "s", 10.0), step("b", 0, "s", 10.0, valid=False)]
    _, adv = gigpo_advantages(invalid, {"a": [10.0], "b": [10.0]}, invalid_penalty=0.5)
    assert adv.tolist() == [0.0, -0.5]  # the penalty once, after both parts


def test_gigpo_with_one_step_a_task_is_twice_grpo():
    """One step a task (the transfer probe): every trial of a task starts in the task's one state, so the
    step group is the episode group and the step advantage repeats the episode one: GiGPO's advantage is
    exactly twice GRPO's (what docs/results/transfer-r1.md says of the probe's GiGPO arm)."""
    from skillrise_train.credit import gigpo_advantages

    tags = [step("a", 0, "s", 10.0), step("b", 0, "s"), step("c", 0, "s", 10.0), step("d", 0, "s")]
    rewards = {"a": [10.0], "b": [0.0], "c": [10.0], "d": [0.0]}
    for mode in ("mean_norm", "mean_std_norm"):
        _, gigpo = gigpo_advantages(tags, rewards, mode=mode, invalid_penalty=0.0)
        _, grpo = assign_credit(tags, rewards, mode=mode, invalid_penalty=0.0)
        assert np.allclose(gigpo, 2 * grpo) and not np.allclose(grpo, 0.0)


def test_anchor_groups_never_cross_tasks_or_task_groups():
    from skillrise_train.credit import anchor_groups

    tags = [step("a", 0, "s", group="t1"), step("b", 0, "s", group="t1"), step("c", 0, "s", group="t2")]
    assert sorted(len(g) for g in anchor_groups(tags).values()) == [1, 2]


def test_the_anchor_key_is_the_state_not_the_prompt():
    from skillrise_train.credit import anchor_key

    one = {"observation": "You are in the kitchen.", "admissible_actions": ["go north", "look"], "prompt": "step 3 ..."}
    two = {**one, "prompt": "step 7 ...", "skill_document": "other notes"}
    assert anchor_key(one) == anchor_key(two) == ("You are in the kitchen.", ("go north", "look"))
    assert anchor_key({**one, "admissible_actions": ["look"]}) != anchor_key(one)
