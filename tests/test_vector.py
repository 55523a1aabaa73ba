"""EnvPool: the same results in-process and in workers, errors re-raised, dead workers reported and replaced."""

import os
import signal
import time

import pytest

from skillrise_gym.pools import EnvPool, WorkerError, env_fn


def play_all(pool, n):
    """Drive every env with the 'look' command until all sequences end; return the per-env summaries."""
    pool.reset_many({i: (i, {"task_ids": ["red-train-1", "red-train-2"]}) for i in range(n)})
    summaries, live = {}, set(range(n))
    while live:
        out = pool.step_many({i: "<skill>x</skill>" for i in live})
        for i, (_obs, _r, done, _t, info) in out.items():
            if done:
                summaries[i] = info["summary"]
                live.discard(i)
    return summaries


def test_workers_match_in_process():
    fns = [env_fn("toy", K=2, max_task_steps=2) for _ in range(3)]
    with EnvPool(fns, workers=0) as local, EnvPool(fns, workers=2) as remote:
        assert play_all(local, 3) == play_all(remote, 3)


def test_env_errors_are_reraised_with_their_type():
    with EnvPool([env_fn("toy", K=1)], workers=1) as pool:
        with pytest.raises(RuntimeError, match="reset"):
            pool.step(0, "look")
        pool.reset(0, seed=0)
        with pytest.raises(TypeError, match="expected str"):
            pool.step(0, 42)
        with pytest.raises(IndexError):
            pool.step(5, "look")


def test_killed_worker_is_reported_and_replaced():
    with EnvPool([env_fn("toy", K=2) for _ in range(4)], workers=2) as pool:
        pool.reset_many({i: (i, None) for i in range(4)})
        os.kill(pool._procs[1].pid, signal.SIGKILL)
        time.sleep(0.2)
        with pytest.raises(WorkerError) as caught:
            pool.step_many({0: "look", 1: "look"})
        assert caught.value.indices == [1, 3]
        obs, info = pool.reset(1, seed=1)  # the replacement worker serves again
        assert info["position"] == 0
        assert pool.call(1, "role") == "solve"


def test_hung_worker_times_out():
    with EnvPool([env_fn("toy", K=1)], workers=1, timeout=2.0) as pool:
        pool.reset(0, seed=0)
        os.kill(pool._procs[0].pid, signal.SIGSTOP)
        try:
            with pytest.raises(WorkerError, match="timed out"):
                pool.step(0, "look")
        finally:
            pass
        pool.reset(0, seed=0)
