"""The trainer's env pool (issue 13): N envs serve every trial of a step, a trial starting on whichever env
frees up. The same seed gives the same turns, rewards and credit for every N; the pool never holds more
than N envs; a worker lost mid-rollout costs nothing and duplicates nothing."""

import os
import signal
import zlib

import pytest

from skillrise_train.config import TrainConfig
from skillrise_gym.pools import PoolConfig
from skillrise_train.credit import assign_credit, gigpo_advantages
from skillrise_train.rollout import RolloutEngine
from skillrise_train.rollout_setup import RolloutConfig, pool_size
from skillrise_train.samples import Completion

K, G, S = 2, 2, 3  # SkillRise: 6 trials a step; GRPO and GiGPO: 12


def answer(prompt: str) -> str:
    """A deterministic answer that still varies: one of the switches the task names (or a note), picked by
    the prompt's checksum, so trials end after different numbers of turns, some solved, some not; one in
    five lacks its tags (the format penalty makes advantages non-zero although a group's trials, answered
    alike, tie)."""
    pick = zlib.crc32(prompt.encode())
    if pick % 5 == 0:
        return "no tags here"
    if "<action></action>" not in prompt:  # a curate turn
        return f"<skill>note {pick % 97}</skill>"
    task = prompt.split("Your task is to: press ", 1)[1].split(".\n", 1)[0]  # "big green switch, then ..."
    switches = task.split(", then ")
    return f"<action>press {switches[pick % len(switches)]}</action>"


def generate(prompts, prefixes, seeds=None):
    return [Completion([zlib.crc32(p.encode()) % 1000], [len(p) % 7], pre + answer(p)) for p, pre in zip(prompts, prefixes)]


def engine(algo: str, envs: int, workers: int = 0, env_timeout: float | None = None, **kwargs) -> RolloutEngine:
    pool = PoolConfig(workers=workers, timeout=env_timeout if workers else None)
    return RolloutEngine(RolloutConfig("toy", algo, K=K, G=G, S=S, max_task_steps=4, seed=7, envs=envs, pool=pool,
                                       **kwargs))


def play(rollout: RolloutEngine, step: int = 0, generate=generate):
    plans = rollout.plan(rollout.sequences(step, S), tag=f"step{step}")
    return plans, rollout.play(plans, generate, step=step)


def undisturbed(algo: str, envs: int, **kwargs):
    """(plans, result) of one rollout on a fresh engine, closed after: the reference a disturbed run must equal."""
    rollout = engine(algo, envs, **kwargs)
    try:
        return play(rollout)
    finally:
        rollout.close()


def turns(result):
    """Everything a sample carries that training or the records use, in the result's order."""
    return [(s.turn.trial_id, s.turn.position, s.turn.role, s.turn.step_index, s.turn.prompt, s.turn.response,
             s.turn.reward, s.turn.success, s.anchor, s.prompt_ids, s.completion_ids) for s in result.samples]


def credit(algo: str, result):
    tags = result.tags(10.0)
    if algo == "gigpo":
        returns, advantages = gigpo_advantages(tags, result.task_rewards)
    else:
        returns, advantages = assign_credit(tags, result.task_rewards)
    return returns.tolist(), advantages.tolist()


@pytest.mark.parametrize("algo", ["skillrise", "grpo", "gigpo"])
def test_the_same_seed_gives_the_same_turns_and_credit_whatever_the_number_of_envs(algo):
    outcomes = {}
    trials = S * G if algo == "skillrise" else S * K * G
    resets = {}
    for envs in (1, 3, trials):
        rollout = engine(algo, envs)
        resets[envs] = []
        reset_many = rollout.pool.reset_many

        def recording(requests, reset_many=reset_many, seen=resets[envs]):
            seen.extend((seed, tuple(options["task_ids"])) for seed, options in requests.values())
            return reset_many(requests)

        rollout.pool.reset_many = recording
        try:
            assert rollout.pool.num_envs == envs and rollout.trials_per_step == trials
            _plans, first = play(rollout)
            _plans, second = play(rollout, step=1)  # the same envs serve the next step
        finally:
            rollout.close()
        outcomes[envs] = [(turns(r), r.task_rewards, r.success, credit(algo, r)) for r in (first, second)]
    assert outcomes[1] == outcomes[3] == outcomes[trials]
    # each trial is reset once, with its own seed and tasks, whichever env it lands on
    assert sorted(resets[1]) == sorted(resets[3]) == sorted(resets[trials]) and len(resets[1]) == 2 * trials
    assert len(set(resets[1])) == 2 * trials
    (samples, rewards, success, (_returns, advantages)), _ = outcomes[1]
    assert len(success) == trials and any(r > 0 for v in rewards.values() for r in v)  # some tasks solved
    assert any(a != 0 for a in advantages) and len({len([t for t in samples if t[0] == p]) for p in success}) > 1
    if algo == "skillrise":
        assert {t[2] for t in samples} == {"solve", "curate"}


def test_samples_come_in_lockstep_order_whatever_the_number_of_envs():
    """Every trial's first turn in plan order, then every trial's second...: the rows TRL splits into
    mini-batches are the same as with one env per trial."""
    rollout = engine("skillrise", 2)
    try:
        plans, result = play(rollout)
    finally:
        rollout.close()
    order = [p.trial_id for p in plans]
    seen: dict[str, int] = {}
    keys = []
    for sample in result.samples:
        keys.append((seen.setdefault(sample.turn.trial_id, 0), order.index(sample.turn.trial_id)))
        seen[sample.turn.trial_id] += 1
    assert keys == sorted(keys) and list(result.success) == order


@pytest.mark.parametrize("algo", ["skillrise", "grpo"])
def test_the_pool_never_holds_more_envs_than_asked(monkeypatch, algo):
    import skillrise_train.rollout as rollout_module

    built = []
    original = rollout_module.env_fn

    def counting_env_fn(*args, **kwargs):
        make = original(*args, **kwargs)

        def counted():
            built.append(1)
            return make()

        return counted

    monkeypatch.setattr(rollout_module, "env_fn", counting_env_fn)
    rollout = engine(algo, 3)
    try:
        plans, first = play(rollout)
        _plans, _second = play(rollout, step=1)
    finally:
        rollout.close()
    assert len(plans) == (S * G if algo == "skillrise" else S * K * G) > 3
    assert rollout.pool.num_envs == 3 and len(built) == 3  # two steps of 6 or 12 trials, three envs made
    assert set(first.success) == {p.trial_id for p in plans} and not first.dropped


def test_grpo_trials_run_on_fewer_envs_than_trials_in_worker_processes():
    """GRPO's S x K x G single-task episodes on 4 envs in 2 workers: every task attempted once per trial,
    the same turns as one env per trial in this process."""
    by_envs = {}
    for envs, workers in ((4, 2), (S * K * G, 0)):
        plans, result = undisturbed("grpo", envs, workers=workers)
        by_envs[envs] = turns(result)
        assert set(result.success) == {p.trial_id for p in plans} and all(len(v) == 1 for v in result.success.values())
        assert sorted(s.turn.task_id for s in result.samples if s.turn.step_index == 0) == sorted(
            p.task_ids[0] for p in plans)
    assert by_envs[4] == by_envs[S * K * G]


def unique_turns(result):
    keys = [(s.turn.trial_id, s.turn.position, s.turn.role, s.turn.step_index) for s in result.samples]
    assert len(keys) == len(set(keys)), "a turn was recorded twice"
    return keys


def play_killing(rollout: RolloutEngine, kill, at_call: int = 3):
    """(plans, result) of one rollout whose `kill()` runs just before its `at_call`-th generation call; the
    engine is closed after."""
    calls = {"n": 0}

    def killing(prompts, prefixes, seeds=None):
        calls["n"] += 1
        if calls["n"] == at_call:
            kill()
        return generate(prompts, prefixes, seeds)

    try:
        return play(rollout, generate=killing)
    finally:
        rollout.close()


def assert_nothing_lost_or_duplicated(plans, killed, calm) -> None:
    assert unique_turns(killed) == unique_turns(calm)
    assert turns(killed) == turns(calm)
    assert killed.success == calm.success and killed.task_rewards == calm.task_rewards
    assert set(killed.success) == {p.trial_id for p in plans}


def kill_worker(rollout: RolloutEngine, w: int):
    def kill():
        os.kill(rollout.pool._procs[w].pid, signal.SIGKILL)
        rollout.pool._procs[w].join(5)

    return kill


def test_a_worker_killed_mid_rollout_loses_nothing_and_duplicates_nothing():
    """3 envs in 2 workers (worker 0 holds envs 0 and 2) play 6 trials; worker 0 is killed just before the
    third generation call: its two trials in flight start again, first in line, and the rollout ends with
    exactly the turns of an undisturbed one."""
    plans, calm = undisturbed("skillrise", 3, workers=2, env_timeout=5.0)
    rollout = engine("skillrise", 3, workers=2, env_timeout=5.0)
    _plans, killed = play_killing(rollout, kill_worker(rollout, 0))
    assert killed.replayed == 2 and not killed.dropped
    assert_nothing_lost_or_duplicated(plans, killed, calm)


def test_a_worker_lost_while_an_env_takes_a_new_trial_restarts_its_other_env_too(caplog):
    """The worker dies during the reset that starts a waiting trial on one of its envs while its other env
    is mid-episode: that trial was not asked anything in the failed call, yet it lost its episode, so it
    restarts too (never continued on an env whose state is gone)."""
    _plans, calm = undisturbed("skillrise", 3, workers=2, env_timeout=5.0)

    rollout = engine("skillrise", 3, workers=2, env_timeout=5.0)
    pool = rollout.pool
    busy: set[int] = set()
    fired = {"siblings": None}
    reset_many, step_many = pool.reset_many, pool.step_many

    def watched_reset(requests):
        siblings = [i for i in busy if i % pool.workers == 0 and i not in requests]
        if fired["siblings"] is None and siblings and any(i % pool.workers == 0 for i in requests):
            fired["siblings"] = siblings
            os.kill(pool._procs[0].pid, signal.SIGKILL)
            pool._procs[0].join(5)
        replies = reset_many(requests)  # raises WorkerError when the kill above happened
        busy.update(i for i, (_obs, info) in replies.items() if not info.get("sequence_done"))
        return replies

    def watched_step(actions):
        replies = step_many(actions)
        busy.difference_update(i for i, (_o, _r, done, cut, _info) in replies.items() if done or cut)
        return replies

    pool.reset_many, pool.step_many = watched_reset, watched_step
    try:
        with caplog.at_level("WARNING", logger="skillrise_train"):
            plans, lost = play(rollout)
    finally:
        rollout.close()
    assert fired["siblings"], "no reset ever ran beside a trial in flight on the same worker"
    assert lost.replayed == 2 and not lost.dropped  # the trial being started and the one in flight beside it
    assert "restarting trial(s)" in caplog.text
    assert unique_turns(lost) == unique_turns(calm) and turns(lost) == turns(calm)
    assert lost.success == calm.success and lost.task_rewards == calm.task_rewards


def test_pool_size_is_bounded_by_the_trials_and_for_jvms_the_memory(monkeypatch):
    import skillrise_train.rollout_setup as rollout_module

    assert rollout_module.available_memory() > 0  # this machine says how much memory is available
    with pytest.raises(ValueError, match="envs must be >= 0"):
        pool_size(-1, 8, "toy")
    assert pool_size(5, 3, "toy") == 3 and pool_size(2, 8, "toy") == 2  # more than the trials: one per trial
    monkeypatch.setattr(rollout_module, "available_memory", lambda: 5_000_000_000)
    # envs without memory of their own: one per trial (CPUs do not bound it; generation batches stay whole)
    assert pool_size(0, 100, "toy") == 100 and pool_size(0, 4, "toy") == 4
    assert pool_size(0, 100, "scienceworld") == 4  # 5 GB hold four JVMs of about 1.2 GB
    assert pool_size(6, 100, "scienceworld") == 6  # asked for: as asked
    monkeypatch.setattr(rollout_module, "available_memory", lambda: 100_000_000)
    assert pool_size(0, 100, "scienceworld") == 1
    monkeypatch.setattr(rollout_module, "available_memory", lambda: None)  # the system says nothing: no bound
    assert pool_size(0, 100, "scienceworld") == 100


def test_envs_is_a_config_field_and_a_negative_value_is_refused():
    from skillrise_train.cli import parse_config

    assert TrainConfig().envs == 0 and parse_config(["--envs", "3"]).envs == 3
    with pytest.raises(ValueError, match=r"envs must be >= 0 \(0 sizes the env pool to the memory\), got -2"):
        TrainConfig(envs=-2)
