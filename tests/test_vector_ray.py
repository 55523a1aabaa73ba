"""RayEnvPool (issue 13): EnvPool's interface and failure contract on Ray actors. On a small local Ray
instance (2 CPUs, a 200 MB object store, one per module): the same results as EnvPool for the bench and
the trainer, a killed actor (ray.kill) or a hung one reported and replaced, and the bench's and the trainer's
replay losing nothing and duplicating nothing. Without Ray: a clear error naming the extra; an address
where nothing listens: a clear error within seconds."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

from skillrise_gym.backends.base import ConfigurationError, MissingDependencyError
from skillrise_gym.pools import EnvPool, WorkerError, env_fn
from test_vector import play_all  # noqa: E402  (the same driver as the in-process pool's tests)

try:  # imported here, not under a test's capsys: Ray's log handler keeps the stream it first sees
    import ray
except ImportError:
    ray = None

needs_ray = pytest.mark.skipif(ray is None, reason="ray is not installed (pip install 'skillrise-gym[ray]')")
needs_trainer = pytest.mark.skipif(importlib.util.find_spec("trl") is None,
                                   reason="the trainer's extra is not installed (pip install 'skillrise-gym[train]')")
NOWHERE = "127.0.0.1:1"  # nothing listens on port 1


@pytest.fixture(scope="module")
def ray_local():
    """One local Ray instance for the module, started as the pools start it (`connect("local")`)."""
    from skillrise_gym.pools.ray import LOCAL_OBJECT_STORE_BYTES, connect

    ray = connect("local")
    assert ray.cluster_resources()["object_store_memory"] <= LOCAL_OBJECT_STORE_BYTES
    yield ray
    ray.shutdown()


def bench_records(out: Path) -> tuple[list[dict], list[dict]]:
    """results.jsonl and turns.jsonl without what depends on timing."""
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    turns = [json.loads(line) for line in (out / "turns.jsonl").read_text().splitlines()]
    for row in rows:
        for key in ("agent_s", "wall_s", "finished_at"):
            row.pop(key)
    for turn in turns:
        turn["extra"].pop("latency_s")
    rows.sort(key=lambda r: (r["K"], r["index"]))
    turns.sort(key=lambda t: t["trial_id"])  # stable: each trial's turns stay in play order
    return rows, turns


# ---------------------------------------------------------------------------- without a cluster
def test_without_ray_the_error_names_the_extra(monkeypatch, tmp_path, capsys):
    from skillrise_gym.bench.cli import main
    from skillrise_gym.pools import RayEnvPool

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if it were not installed
    with pytest.raises(MissingDependencyError, match=r"pip install 'skillrise-gym\[ray\]'"):
        RayEnvPool([env_fn("toy", K=1)])
    out = tmp_path / "run"
    assert main(["--env", "toy", "--agent", "expert", "--out", str(out), "--ray-address", "local"]) == 2
    assert "pip install 'skillrise-gym[ray]'" in capsys.readouterr().err and not out.exists()


def test_ray_settings_are_checked_before_anything_starts():
    from skillrise_gym.bench.runner import BenchConfig
    from skillrise_gym.pools import PoolConfig, RayEnvPool, make_pool

    with pytest.raises(ValueError, match="at least one env"):
        RayEnvPool([])
    with pytest.raises(ValueError, match="need --ray-address"):
        make_pool([env_fn("toy", K=1)], PoolConfig(ray_num_cpus=1))
    with pytest.raises(ValueError, match="need --ray-address"):
        BenchConfig(env="toy", out="unused", ray_memory=1e9)
    with pytest.raises(ValueError, match="--ray-num-cpus .* >= 0"):
        BenchConfig(env="toy", out="unused", ray_address="local", ray_num_cpus=-1)
    with pytest.raises(ValueError, match="--ray-memory .* >= 1"):
        BenchConfig(env="toy", out="unused", ray_address="local", ray_memory=0)
    with pytest.raises(ValueError, match="--ray-address must be"):
        BenchConfig(env="toy", out="unused", ray_address=" ")
    with pytest.raises(ValueError, match="timeout"):
        RayEnvPool([env_fn("toy", K=1)], timeout=0)
    if importlib.util.find_spec("transformers") is not None:
        from skillrise_train.config import TrainConfig

        with pytest.raises(ValueError, match="need --ray-address"):
            TrainConfig(env="toy", ray_num_cpus=1)


@needs_ray
def test_an_address_where_nothing_listens_is_refused_within_seconds(tmp_path, capsys):
    from skillrise_gym.bench.cli import main
    from skillrise_gym.pools import RayEnvPool

    ray.shutdown()  # a process already connected would use that connection
    started = time.monotonic()
    with pytest.raises(ConfigurationError, match=f"no Ray cluster at {NOWHERE}"):
        RayEnvPool([env_fn("toy", K=1)], address=NOWHERE)
    out = tmp_path / "run"
    assert main(["--env", "toy", "--agent", "expert", "--out", str(out), "--ray-address", NOWHERE]) == 2
    err = capsys.readouterr().err
    assert f"no Ray cluster at {NOWHERE}" in err and "ray start --head" in err and not out.exists()
    if importlib.util.find_spec("trl") is not None:
        from skillrise_train.cli import main as train

        assert train(["--env", "toy", "--model", "tiny", "--ray-address", NOWHERE,
                      "--output-dir", str(tmp_path / "train")]) == 2
        assert f"no Ray cluster at {NOWHERE}" in capsys.readouterr().err and not (tmp_path / "train").exists()
    assert time.monotonic() - started < 30  # Ray's own client would still be retrying
    assert not ray.is_initialized()


# ---------------------------------------------------------------------------- on a local cluster
def kill_and_wait(ray_module, actor, seconds: float = 60.0) -> None:
    """`ray.kill` only sends the kill: on a loaded machine the actor can still answer a call made right after
    it (seen once in CI). Wait until the actor is known dead, so the next call meets a dead actor."""
    ray_module.kill(actor)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            ray_module.get(actor.__ray_ready__.remote(), timeout=5)
        except ray_module.exceptions.RayActorError:
            return
        except ray_module.exceptions.GetTimeoutError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"the killed actor still answered after {seconds} s")


@needs_ray
def test_envs_on_ray_answer_as_in_process_and_lost_actors_are_replaced(ray_local):
    from skillrise_gym.pools import RayEnvPool

    fns = [env_fn("toy", K=2, max_task_steps=2, backend_options={"hang_on": ["blue-train-1"]}) for _ in range(3)]
    with EnvPool(fns, workers=0) as local, RayEnvPool(fns, address="local", timeout=60.0) as pool:
        assert play_all(pool, 3) == play_all(local, 3)
        assert pool.workers == pool.num_envs == 3
        pool.reset(0, seed=0)
        with pytest.raises(TypeError, match="expected str"):  # an env's error, re-raised with its type
            pool.step(0, 42)
        with pytest.raises(IndexError):
            pool.step(5, "look")

        pool.reset_many({i: (i, None) for i in range(3)})
        kill_and_wait(ray_local, pool._actors[1])
        with pytest.raises(WorkerError, match="actor of env 1 died") as caught:
            pool.step_many({0: "look", 1: "look"})
        assert caught.value.indices == [1]
        assert list(EnvPool.unpack(caught.value.replies)) == [0]  # env 0 answered: its episode goes on
        _obs, info = pool.reset(1, seed=1)  # the replacement actor serves again
        assert info["position"] == 0 and pool.call(1, "role") == "solve"

        pool.reset(2, options={"task_ids": ["blue-train-1", "blue-train-2"]})
        pool.timeout, started = 2.0, time.monotonic()  # short for the hung env alone: a busy machine is slow
        with pytest.raises(WorkerError, match="actor of env 2 timed out"):
            pool.step(2, "look")  # the toy engine hangs on this task's first step
        assert time.monotonic() - started < 10
        pool.timeout = 60.0
        _obs, info = pool.reset(2, seed=0)
        assert info["position"] == 0


@needs_ray
def test_a_bench_on_ray_gives_envpools_results_also_with_an_actor_killed_mid_run(ray_local, tmp_path, monkeypatch):
    import skillrise_gym.bench.runner as runner
    from skillrise_gym.agents.random_agent import RandomAgent
    from skillrise_gym.bench.runner import BenchConfig, run_bench

    def config(name, **kwargs):
        return BenchConfig(env="toy", out=str(tmp_path / name), K=[1, 3], num_sequences=4, parallel=2,
                           progress=False, plots=False, **kwargs)

    assert run_bench(config("envpool", workers=0), RandomAgent(seed=0, benchmark="toy")).status == "complete"
    assert run_bench(config("ray", ray_address="local"), RandomAgent(seed=0, benchmark="toy")).status == "complete"
    assert bench_records(tmp_path / "ray") == bench_records(tmp_path / "envpool")

    pools = []
    make_pool = runner.make_pool

    def recording(*args, **kwargs):
        pools.append(make_pool(*args, **kwargs))
        return pools[-1]

    class KillingAgent(RandomAgent):
        calls = 0

        def act(self, observations, infos=None):
            type(self).calls += 1
            if type(self).calls == 5:  # mid-sequence on K=3
                ray_local.kill(pools[-1]._actors[0])
            return super().act(observations, infos)

    monkeypatch.setattr(runner, "make_pool", recording)
    assert run_bench(config("killed", ray_address="local"), KillingAgent(seed=0, benchmark="toy")).status == "complete"
    rows, turns = bench_records(tmp_path / "killed")
    assert sorted(r.pop("attempt") for r in rows) == [1] * 7 + [2]  # the sequence on the killed actor, replayed
    calm_rows, calm_turns = bench_records(tmp_path / "envpool")
    for row in calm_rows:
        row.pop("attempt")
    assert rows == calm_rows and turns == calm_turns  # nothing lost, nothing recorded twice


@needs_ray
def test_another_process_plays_on_the_cluster_by_its_address(ray_local, tmp_path):
    """`--ray-address host:port` as on a cluster: a second driver process (the bench CLI) joins this module's
    Ray instance by its address and records what EnvPool records."""
    import subprocess

    from skillrise_gym.agents.random_agent import RandomAgent
    from skillrise_gym.bench.runner import BenchConfig, run_bench

    flags = ["--env", "toy", "--agent", "random", "--K", "2", "--num-sequences", "3", "--envs", "2",
             "--no-progress", "--no-plots"]
    address = ray_local.get_runtime_context().gcs_address
    done = subprocess.run([sys.executable, "-m", "skillrise_gym.bench.cli", *flags, "--ray-address", address,
                           "--out", str(tmp_path / "cluster")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"Connecting to existing Ray cluster at address: {address}" in done.stderr
    local = BenchConfig(env="toy", out=str(tmp_path / "envpool"), K=[2], num_sequences=3, parallel=2, workers=0,
                        progress=False, plots=False)
    assert run_bench(local, RandomAgent(seed=0, benchmark="toy")).status == "complete"
    assert bench_records(tmp_path / "cluster") == bench_records(tmp_path / "envpool")


@needs_ray
def test_sigterm_stops_a_bench_on_ray_as_ctrl_c_does(ray_local, tmp_path):
    """Ray's init replaces the process's SIGTERM handler with a sys.exit(15): the bench kept it (issue 46,
    item 12), so a scheduler's SIGTERM mid-run keeps what finished and writes the summary (exit 130)."""
    import signal
    import subprocess

    out = tmp_path / "run"
    flags = ["--env", "toy", "--agent", "random", "--K", "2", "--num-sequences", "400", "--envs", "2",
             "--no-progress", "--no-plots", "--ray-address", ray_local.get_runtime_context().gcs_address]
    child = subprocess.Popen([sys.executable, "-m", "skillrise_gym.bench.cli", *flags, "--out", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while child.poll() is None and time.monotonic() < deadline:
            if (out / "results.jsonl").exists() and (out / "results.jsonl").read_text().count("\n") >= 2:
                break
            time.sleep(0.1)
        assert child.poll() is None, child.stderr.read()[-3000:]
        child.send_signal(signal.SIGTERM)
        _stdout, stderr = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    # before: exit status 15 (Ray's handler), no summary
    assert child.returncode == 130, stderr[-3000:]
    assert "interrupted; re-run the same command to resume" in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and 2 <= summary["finished"] < 400


@needs_ray
@pytest.mark.parametrize("overlap", [False, True])
def test_a_rollout_on_ray_with_an_actor_killed_mid_rollout_loses_nothing_and_duplicates_nothing(ray_local, overlap):
    """Lockstep and overlapped: the killed actor's one trial restarts; the turns are an undisturbed run's."""
    from test_train_rollout import G, K, S, assert_nothing_lost_or_duplicated, play, play_killing

    from skillrise_train.rollout import RolloutEngine
    from skillrise_train.rollout_setup import RolloutConfig
    from skillrise_gym.pools import PoolConfig

    calm_engine = RolloutEngine(RolloutConfig("toy", "skillrise", K=K, G=G, S=S, max_task_steps=4, seed=7, envs=3))  # in-process
    try:
        plans, calm = play(calm_engine)
    finally:
        calm_engine.close()
    rollout = RolloutEngine(RolloutConfig("toy", "skillrise", K=K, G=G, S=S, max_task_steps=4, seed=7, envs=3,
                                          pool=PoolConfig(ray_address="local", timeout=30.0), overlap=overlap,
                                          overlap_wait=0.0))
    _plans, killed = play_killing(rollout, lambda: ray_local.kill(rollout.pool._actors[0]))
    assert killed.replayed == 1 and not killed.dropped  # one actor, one env, one trial restarted
    assert_nothing_lost_or_duplicated(plans, killed, calm)


@needs_ray
@needs_trainer
def test_one_training_step_runs_on_ray(ray_local, tmp_path, capsys):
    from skillrise_train.cli import main

    out = tmp_path / "run"
    assert main(["--env", "toy", "--model", "tiny", "--max-new-tokens", "8", "--threads", "1", "--K", "2",
                 "--G", "2", "--S", "1", "--steps", "1", "--max-task-steps", "2", "--eval-sequences", "1",
                 "--ray-address", "local", "--output-dir", str(out)]) == 0
    assert "envs=2" in capsys.readouterr().out
    turns = [json.loads(line) for line in (out / "turns.jsonl").read_text().splitlines()]
    assert {t["trial_id"].rsplit("/", 1)[1] for t in turns} == {"g0", "g1"}
    assert (out / "eval" / "step-1" / "summary.json").exists()


@needs_ray
def test_submitted_commands_on_ray_answer_as_in_process_and_a_hung_actor_times_out(ray_local):
    from skillrise_gym.pools import RayEnvPool

    fns = [env_fn("toy", K=2, max_task_steps=2, backend_options={"hang_on": ["blue-train-1"]}) for _ in range(2)]
    resets = {0: (0, {"task_ids": ["red-train-1", "red-train-2"]}), 1: (1, {"task_ids": ["blue-train-1", "blue-train-2"]})}
    with EnvPool(fns, workers=0) as local, RayEnvPool(fns, address="local", timeout=60.0) as pool:
        expected = local.reset_many(resets)
        pool.submit_resets(resets)
        got = {}
        while pool.pending:
            got.update(pool.receive(timeout=30.0))
        assert got == expected and pool.receive(timeout=0) == {}
        pool.submit_steps({0: "look", 1: "look"})
        with pytest.raises(RuntimeError, match="have a command pending"):
            pool.submit_steps({1: "look"})
        pool.timeout = 2.0  # the toy engine hangs on blue-train-1's first step
        answered = {}
        with pytest.raises(WorkerError, match="actor of env 1 timed out") as caught:
            while True:
                answered.update(pool.receive())
        assert caught.value.indices == [1] and not pool.pending
        answered.update(EnvPool.unpack(caught.value.replies))
        assert list(answered) == [0] and answered[0] == local.step(0, "look")
        pool.timeout = 60.0
        assert pool.reset(1, seed=0)[1]["position"] == 0  # the replacement actor serves


@needs_ray
@pytest.mark.parametrize("options, error, said", [
    ({"java": "/nonexistent/java"}, "JavaNotFoundError", "not an executable"),
    ({"jvm_options": ["-Xfoo"]}, "JVMStartError", "Unrecognized option: -Xfoo"),
])
def test_a_jvm_that_cannot_start_inside_a_ray_actor_is_its_own_clear_error(ray_local, options, error, said):
    """ScienceWorld's env is made in its actor at the first command: a missing java, or a JVM that refuses
    to start, comes back as the same error as in this process (type and words), not as a lost actor."""
    pytest.importorskip("scienceworld")
    from skillrise_gym.backends.scienceworld import jvm
    from skillrise_gym.pools import RayEnvPool

    fn = env_fn("SkillRise-ScienceWorld-v0", K=1, backend_options={"tasks": ["boil"], **options})
    with RayEnvPool([fn], address="local", timeout=120.0) as pool:
        with pytest.raises(getattr(jvm, error), match=said):
            pool.reset(0, seed=0)
        with pytest.raises(getattr(jvm, error), match=said):  # asynchronously too, and the actor still answers
            pool.submit_resets({0: (0, None)})
            pool.receive(timeout=60.0)
