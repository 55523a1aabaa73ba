"""Overlapped rollouts (issue 13): envs step in their workers while the model generates for other trials.
The same seed gives the same turns, rewards and credit as lockstep rounds, whatever N and the timing; a
worker lost mid-rollout costs nothing and duplicates nothing; the pool's asynchronous API keeps EnvPool's
failure contract."""

import os
import signal
import time

import pytest

from skillrise_gym.pools import EnvPool, WorkerError, env_fn
from skillrise_train.config import TrainConfig
from skillrise_gym.player import Pacer as _Pacer
from test_train_rollout import (G, K, S, assert_nothing_lost_or_duplicated, credit, engine, generate, kill_worker,
                                play, play_killing, turns, undisturbed)


def outcome(algo, result):
    return turns(result), result.task_rewards, result.success, credit(algo, result)


@pytest.mark.parametrize("algo", ["skillrise", "grpo", "gigpo"])
def test_overlapped_rollouts_give_lockstep_turns_and_credit_whatever_n_and_timing(algo):
    trials = S * G if algo == "skillrise" else S * K * G
    _plans, reference = undisturbed(algo, 1)
    expected = outcome(algo, reference)
    # N = 1, 3 and one env per trial; the cap on waiting 0 s (every call takes whoever waits) and 1 s; a
    # jittery generator (sleeps of 0 to 9 ms), so batches form differently from run to run
    for envs, wait in ((1, 1.0), (3, 0.0), (3, 1.0), (trials, 0.0)):
        def jittery(prompts, prefixes, seeds=None):
            time.sleep((len(prompts) * 7 % 10) / 1000)
            return generate(prompts, prefixes)

        _plans, result = undisturbed(algo, envs, workers=2, env_timeout=10.0, overlap=True, overlap_wait=wait)
        assert outcome(algo, result) == expected, (envs, wait)
        rollout = engine(algo, envs, workers=2, env_timeout=10.0, overlap=True, overlap_wait=wait)
        try:
            _plans, first = play(rollout, generate=jittery)
            _plans, second = play(rollout, step=1, generate=jittery)  # the same envs serve the next step
        finally:
            rollout.close()
        assert outcome(algo, first) == expected
        assert len(second.samples) > 0 and set(second.success) == {p.trial_id for p in _plans}


def test_envs_step_while_the_model_generates():
    """With a generator that takes its time, a call happens while other trials' env steps are pending in
    the workers (lockstep never has a step pending during a call)."""
    for overlap in (False, True):
        rollout = engine("skillrise", 4, workers=2, env_timeout=10.0, overlap=overlap, overlap_wait=0.0)
        pending_during_calls = []

        def slow(prompts, prefixes, seeds=None, rollout=rollout, seen=pending_during_calls):
            seen.append(len(rollout.pool.pending))
            time.sleep(0.02)
            return generate(prompts, prefixes)

        try:
            play(rollout, generate=slow)
        finally:
            rollout.close()
        assert (max(pending_during_calls) > 0) == overlap, pending_during_calls


def test_a_worker_killed_mid_overlapped_rollout_loses_nothing_and_duplicates_nothing():
    plans, calm = undisturbed("skillrise", 3, workers=2, env_timeout=5.0)
    rollout = engine("skillrise", 3, workers=2, env_timeout=5.0, overlap=True, overlap_wait=0.0)
    _plans, killed = play_killing(rollout, kill_worker(rollout, 0))
    assert killed.replayed >= 1 and not killed.dropped
    assert_nothing_lost_or_duplicated(plans, killed, calm)


def test_overlap_settings_are_config_fields_and_bad_values_are_refused():
    from skillrise_train.cli import parse_config

    config = parse_config(["--overlap", "--overlap-wait", "0.2"])
    assert config.overlap and config.overlap_wait == 0.2 and not TrainConfig().overlap
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="overlap_wait must be a number of seconds >= 0"):
            TrainConfig(overlap_wait=bad)
        with pytest.raises(ValueError, match="overlap_wait must be a number of seconds >= 0"):
            engine("skillrise", 1, overlap=True, overlap_wait=bad)


def test_overlap_in_this_process_warns_that_nothing_overlaps(caplog):
    with caplog.at_level("WARNING", logger="skillrise_train"):
        _plans, result = undisturbed("skillrise", 2, overlap=True)
    assert "nothing overlaps" in caplog.text
    assert turns(result) == turns(undisturbed("skillrise", 2)[1])


# ------------------------------------------------------------------ the pacer
def test_the_pacer_waits_for_busy_envs_only_while_they_cost_less_than_a_call():
    pacer = _Pacer(cap=1.0)
    now = time.perf_counter()
    assert pacer.wait({}, {0: now}) is None  # nothing waits: block for the next reply
    assert pacer.wait({0: now}, {}) == 0.0  # nothing busy: call now
    assert 0.9 < pacer.wait({0: now}, {1: now}) <= 1.0  # nothing known yet: wait for every env, up to the cap
    assert pacer.wait({0: now - 2.0}, {1: now}) == 0.0  # the cap is reached
    pacer.generated(1, 0.040)
    pacer.generated(4, 0.046)
    pacer.generated(8, 0.054)
    assert pacer.overhead() == pytest.approx(0.038, abs=1e-3)  # the intercept of 38 ms + 2 ms a prompt
    for _ in range(5):
        pacer.answered(0.010)  # envs answer in 10 ms: cheaper than a call's overhead, so wait for them
    assert 0.0 < pacer.wait({0: time.perf_counter()}, {1: time.perf_counter()}) < 0.05
    slow = _Pacer(cap=1.0)
    slow.generated(2, 0.030)
    for _ in range(5):
        slow.answered(0.500)  # envs take 0.5 s: a call now costs less than waiting for them...
    now = time.perf_counter()
    assert slow.wait({0: now}, {1: now}) == 0.0
    assert slow.wait({0: now}, {1: now, 2: now}) > 0.0  # ... once half the trials in play wait (two groups)
    assert slow.wait({0: now, 3: now}, {1: now, 2: now}) == 0.0


# ------------------------------------------------------------------ the pool's asynchronous API
def _fns(n):
    return [env_fn("toy", K=2, max_task_steps=2) for _ in range(n)]


RESETS = {i: (i, {"task_ids": ["red-train-1", "red-train-2"]}) for i in range(4)}


@pytest.mark.parametrize("workers", [0, 2])
def test_submitted_commands_answer_as_the_synchronous_calls(workers):
    with EnvPool(_fns(4), workers=workers) as sync, EnvPool(_fns(4), workers=workers, timeout=10.0) as pool:
        expected = sync.reset_many(RESETS)
        pool.submit_resets(RESETS)
        got = {}
        while pool.pending:
            got.update(pool.receive(timeout=5.0))
        assert got == expected and pool.receive(timeout=0) == {}  # nothing pending: {} at once
        pool.submit_steps({0: "look", 2: "look"})
        with pytest.raises(RuntimeError, match=r"envs \[0, 2\] have commands pending"):
            pool.step_many({1: "look"})
        with pytest.raises(RuntimeError, match=r"envs \[0\] have a command pending"):
            pool.submit_steps({0: "look"})
        with pytest.raises(IndexError):
            pool.submit_steps({9: "look"})
        answered = {}
        while pool.pending:
            answered.update(pool.receive())
        assert answered == sync.step_many({0: "look", 2: "look"})


def test_an_env_error_comes_back_from_receive_with_its_type():
    with EnvPool(_fns(1), workers=1, timeout=10.0) as pool:
        pool.submit_steps({0: "look"})  # before any reset
        with pytest.raises(RuntimeError, match="reset"):
            pool.receive(timeout=5.0)
        assert not pool.pending


def test_a_worker_killed_with_commands_pending_is_reported_and_replaced():
    with EnvPool(_fns(4), workers=2, timeout=10.0) as pool:
        pool.reset_many(RESETS)
        os.kill(pool._procs[1].pid, signal.SIGKILL)
        pool._procs[1].join(5)
        pool.submit_steps({0: "look", 1: "look", 2: "look"})
        replies = {}
        with pytest.raises(WorkerError, match="worker 1 died") as caught:
            while pool.pending:
                replies.update(pool.receive(timeout=5.0))
        assert caught.value.indices == [1, 3]  # env 3 had nothing pending, yet its episode is gone too
        replies.update(EnvPool.unpack(caught.value.replies))
        while pool.pending:
            replies.update(pool.receive(timeout=5.0))
        assert sorted(replies) == [0, 2] and not pool.pending
        assert pool.reset(1, seed=1)[1]["position"] == 0  # the replacement worker serves


def test_a_silent_worker_times_out_within_its_timeout():
    with EnvPool(_fns(2), workers=2, timeout=1.0) as pool:
        pool.reset_many({i: RESETS[i] for i in range(2)})
        os.kill(pool._procs[0].pid, signal.SIGSTOP)
        pool.submit_steps({0: "look", 1: "look"})
        got = {}
        with pytest.raises(WorkerError, match=r"worker 0 timed out \(no answer within 1.0 s\)") as caught:
            while True:
                got.update(pool.receive())  # no timeout of its own: the pool's bounds the wait
        assert caught.value.indices == [0]
        assert 1 in got or 1 in caught.value.replies
        assert pool.reset(0, seed=0)[1]["position"] == 0


def test_closing_a_pool_with_commands_pending_does_not_hang():
    pool = EnvPool(_fns(2), workers=2, timeout=10.0)
    pool.reset_many({i: RESETS[i] for i in range(2)})
    pool.submit_steps({0: "look", 1: "look"})
    pool.close()  # reads the replies, then stops the workers (their envs closed)
    assert all(p is None for p in pool._procs)
    with pytest.raises(RuntimeError, match="closed"):
        pool.receive()


# ------------------------------------------------------------------ sampling that does not depend on the batch
def test_seeded_sampling_draws_from_the_softmax_and_each_row_from_its_own_seed():
    import torch

    from skillrise_train.sampling import SeededSampling

    scores = torch.tensor([[0.0, 1.0, 2.0, float("-inf")]])
    draws = [int(SeededSampling([seed])(None, scores).argmax()) for seed in range(4000)]
    expected = torch.softmax(scores[0], dim=-1).tolist()
    for token, p in enumerate(expected):
        assert abs(draws.count(token) / len(draws) - p) < 0.03, (token, draws.count(token), p)
    assert draws.count(3) == 0  # a token the warpers removed is never drawn
    # a row's noise follows its seed, not its place in the batch or its batch-mates
    batch = SeededSampling([5, 9, 11])(None, scores.repeat(3, 1))
    alone = SeededSampling([9])(None, scores)
    assert torch.equal(batch[1], alone[0])
    with pytest.raises(ValueError, match="2 rows of scores for 3 seeds"):
        SeededSampling([1, 2, 3])(None, scores.repeat(2, 1))


@pytest.fixture(scope="module")
def sampling_trainer(tmp_path_factory):
    """The trainer on the tiny offline model, sampling at temperature 1 (its real generation path)."""
    from skillrise_train.trainer import SkillRiseTrainer

    config = TrainConfig(env="toy", model="tiny", lora=False, K=K, G=G, S=S, max_task_steps=4, max_new_tokens=6,
                         steps=1, output_dir=str(tmp_path_factory.mktemp("sampling")), record_turns=False,
                         seed=3, threads=1, temperature=1.0)
    trainer = SkillRiseTrainer.from_config(config)
    yield trainer
    trainer.rollout.close()


def test_sampled_tokens_follow_the_prompt_and_its_seed_not_the_batch(sampling_trainer):
    trainer = sampling_trainer
    prompts = ["Your task is to: press the red switch.", "Curate the skill document.", "Look around the room."]
    together = trainer.generate_completions(prompts, ["<action>", "<skill>", "<action>"], [11, 12, 13])
    apart = trainer.generate_completions(prompts[2:] + prompts[:1], ["<action>", "<action>"], [13, 11])
    assert [c.completion_ids for c in apart] == [together[2].completion_ids, together[0].completion_ids]
    draws = {tuple(c.completion_ids) for c in trainer.generate_completions([prompts[0]] * 6, ["<action>"] * 6,
                                                                           list(range(6)))}
    assert len(draws) > 1  # it samples: other seeds, other tokens


def test_a_sampled_rollout_gives_the_same_turns_whatever_n_and_overlap(sampling_trainer):
    """The real policy sampling at temperature 1: one env in this process in lockstep rounds, and three
    envs in two workers overlapped (batches formed by timing) play the same turns."""
    generate = sampling_trainer.generate_completions
    runs = []
    for envs, workers, overlap in ((1, 0, False), (3, 2, True)):
        rollout = engine("skillrise", envs, workers=workers, env_timeout=60.0, overlap=overlap, overlap_wait=0.0)
        try:
            runs.append(play(rollout, generate=generate)[1])
        finally:
            rollout.close()
    assert turns(runs[0]) == turns(runs[1])
    assert len({s.turn.response for s in runs[0].samples}) > 3  # sampled answers, not one repeated


def test_a_sampled_evaluation_does_not_depend_on_its_batches(sampling_trainer, tmp_path):
    """The trainer's evaluation (a bench run of the policy) seeds each turn by its trial and turn too: one
    sequence at a time or three in one call, the same sampled answers."""
    import dataclasses
    import json

    from skillrise_train.evaluate import evaluate

    answers = []
    for batch in (1, 3):
        config = dataclasses.replace(sampling_trainer.config, eval_sequences=3, generation_batch=batch)
        evaluate(config, sampling_trainer.episode, sampling_trainer.generate_completions, 0, "train",
                 tmp_path / f"b{batch}")
        lines = (tmp_path / f"b{batch}" / "eval" / "step-0" / "turns.jsonl").read_text().splitlines()
        answers.append(sorted((t["trial_id"], t["position"], t["role"], t["step_index"], t["response"])
                              for t in map(json.loads, lines)))
    assert answers[0] == answers[1] and len({a[-1] for a in answers[0]}) > 1
