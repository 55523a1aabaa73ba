"""ScienceWorld JVM lifecycle: heap cap and flags, close, garbage collection, worker exit, killed parent,
a JVM killed with -9 mid-task (engine error, then restart), a hung JVM (watchdog), and no JVM left behind."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("scienceworld")
psutil = pytest.importorskip("psutil")

from skillrise_gym.backends import EngineError  # noqa: E402
from skillrise_gym.backends.scienceworld import ScienceWorldBackend  # noqa: E402
from skillrise_gym.tasks import Task  # noqa: E402



def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.1)
    return False


def boil(variation: int = 0) -> Task:
    return Task("scienceworld", f"boil-{variation}", "boil", 1.0, "train",
                {"task_name": "boil", "variation": variation, "simplifications": "easy"})


def test_heap_cap_and_determinism_flags_are_passed():
    with ScienceWorldBackend(max_heap="512m", jvm_options=["-Dskillrise.test=1"]) as backend:
        backend.reset(boil())
        cmdline = psutil.Process(backend.jvm_pid).cmdline()
        assert "-Xmx512m" in cmdline and "-XX:hashCode=2" in cmdline and "-Dskillrise.test=1" in cmdline
    with ScienceWorldBackend(deterministic=False) as backend:
        backend.reset(boil())
        cmdline = psutil.Process(backend.jvm_pid).cmdline()
        assert "-Xmx1g" in cmdline and "-XX:hashCode=2" not in cmdline


def test_close_ends_the_jvm():
    backend = ScienceWorldBackend()
    backend.reset(boil())
    pid = backend.jvm_pid
    assert psutil.pid_exists(pid)
    backend.close()
    assert wait_gone(pid)
    assert backend.jvm_pid is None
    backend.close()


def test_garbage_collection_ends_the_jvm():
    backend = ScienceWorldBackend()
    backend.reset(boil())
    pid = backend.jvm_pid
    del backend
    gc.collect()
    assert wait_gone(pid)


def test_killed_jvm_is_an_engine_error_then_restarts():
    with ScienceWorldBackend() as backend:
        backend.reset(boil(1))
        backend.step("look around")
        first_pid = backend.jvm_pid
        os.kill(first_pid, signal.SIGKILL)
        assert wait_gone(first_pid)
        with pytest.raises(EngineError, match="boil-1"):
            backend.step("open door to kitchen")
        # The lost task stays lost (never a silent success or failure) until the next reset.
        with pytest.raises(EngineError):
            backend.step("look around")
        assert backend.expert_action() is None and backend.action_grammar() is None
        result = backend.reset(boil(1))
        assert result.observation.startswith("This room is called") and backend.jvm_starts == 2
        assert backend.jvm_pid != first_pid
        assert backend.step("look around").observation.startswith("This room is called")


def test_hung_jvm_is_killed_by_the_watchdog():
    with ScienceWorldBackend(call_timeout=5) as backend:
        backend.reset(boil(2))
        pid = backend.jvm_pid
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(EngineError, match="no answer"):
                backend.step("look around")
            assert wait_gone(pid)
        finally:
            if psutil.pid_exists(pid):
                os.kill(pid, signal.SIGCONT)
        backend.call_timeout = 300  # the replacement JVM's start-up must not race a short test timeout
        assert backend.reset(boil(2)).observation and backend.jvm_starts == 2


CHILD = textwrap.dedent(
    """
    import sys, time
    from skillrise_gym.backends.scienceworld import ScienceWorldBackend
    from skillrise_gym.tasks import Task
    backend = ScienceWorldBackend()
    backend.reset(Task("scienceworld", "boil-0", "boil", 1.0, "train", {"task_name": "boil", "variation": 0}))
    print(backend.jvm_pid, flush=True)
    if sys.argv[1] == "hang":
        time.sleep(600)
    # "exit": leave without close(); the interpreter's exit must end the JVM
    """
)


@pytest.mark.parametrize("how", ["exit", "killed"])
def test_worker_exit_or_killed_parent_ends_the_jvm(how):
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, "hang" if how == "killed" else "exit"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        pid = int(child.stdout.readline())
        if how == "killed":
            child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        assert wait_gone(pid), f"JVM {pid} outlived its parent ({how})"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_engine_debug_output_is_silenced_at_the_source():
    """The engine prints ~15 KB of debug text per step; it must not flow through a Python thread."""
    with ScienceWorldBackend() as backend:
        backend.reset(boil(3))
        for action in ("look around", "open door to kitchen", "go to kitchen", "dance"):
            backend.step(action)
        assert backend.admissible_actions()
        assert list(backend._jvm.stdout_tail) == []


def test_transfer_files_of_dead_processes_are_swept(tmp_path):
    from skillrise_gym.backends.scienceworld.jvm import _sweep_stale_scratch

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"skillrise-sciworld-{dead.pid}-abc.txt"
    live = tmp_path / f"skillrise-sciworld-{os.getpid()}-abc.txt"
    other = tmp_path / "unrelated.txt"
    for path in (stale, live, other):
        path.write_text("x")
    _sweep_stale_scratch(str(tmp_path))
    assert not stale.exists() and live.exists() and other.exists()


def _java_children() -> list:
    return [p for p in psutil.Process().children(recursive=True) if "java" in p.name()]


@pytest.mark.parametrize("options, said", [
    ({"jvm_options": ["-Xfoo"]}, "Unrecognized option: -Xfoo"),
    ({"java": "/bin/false"}, "exit status 1"),
])
def test_a_jvm_that_cannot_start_is_a_configuration_error_with_its_own_message(options, said):
    """Not one engine error per task (issue 11 item 11): the first reset raises JVMStartError carrying the
    JVM's words, and no java process is left behind."""
    import gymnasium as gym

    from skillrise_gym.backends.scienceworld.jvm import JVMStartError

    before = {p.pid for p in _java_children()}
    env = gym.make("SkillRise-ScienceWorld-v0", backend_options={"tasks": ["boil"], **options})
    try:
        with pytest.raises(JVMStartError, match=said):
            env.reset(seed=0)
    finally:
        env.close()
    assert {p.pid for p in _java_children()} <= before


def test_bench_stops_at_once_on_a_jvm_that_cannot_start(tmp_path):
    code = subprocess.run(
        [sys.executable, "-m", "skillrise_gym.bench.cli", "--env", "scienceworld", "--agent", "random", "--K", "1",
         "--num-sequences", "3", "--backend-option", 'jvm_options=["-Xfoo"]', "--out", str(tmp_path / "run"),
         "--no-progress"], capture_output=True, text=True, timeout=300)
    assert code.returncode == 2
    assert "Unrecognized option: -Xfoo" in code.stderr and "re-run" not in code.stderr
    assert "Traceback" not in code.stderr
    assert not (tmp_path / "run" / "results.jsonl").exists() or not (tmp_path / "run" / "results.jsonl").read_text()


def test_a_bad_heap_size_is_refused_when_the_env_is_made():
    import gymnasium as gym

    with pytest.raises(ValueError, match="max_heap must be a JVM heap size"):
        gym.make("SkillRise-ScienceWorld-v0", backend_options={"max_heap": "abc"})


@pytest.mark.parametrize("overlap", [False, True])
def test_a_training_rollout_never_runs_more_jvms_than_its_envs(overlap):
    """Issue 13: a step of 4 trials on a pool of N=2 envs in a worker process starts two JVMs, counted as
    java processes below this one at every generation call, each reused by the trials its env plays."""
    from skillrise_train.rollout import RolloutEngine
    from skillrise_train.samples import Completion
    from skillrise_train.rollout_setup import RolloutConfig
    from skillrise_gym.pools import PoolConfig

    before = {p.pid for p in _java_children()}
    counts = []

    def generate(prompts, prefixes, seeds=None):
        counts.append(len([p for p in _java_children() if p.pid not in before]))
        return [Completion([1], [1], "<action>look around</action>") for _ in prompts]  # K=1: solve turns only

    rollout = RolloutEngine(RolloutConfig("scienceworld", "skillrise", K=1, G=2, S=2, max_task_steps=2, seed=0, envs=2,
                                          pool=PoolConfig(workers=1, timeout=300.0), overlap=overlap,
                                          backend_options={"tasks": ["boil"]}))
    try:
        plans = rollout.plan(rollout.sequences(0, 2), tag="jvm")
        result = rollout.play(plans, generate)
    finally:
        rollout.close()
    assert len(plans) == 4 and set(result.success) == {p.trial_id for p in plans} and not result.dropped
    assert max(counts) == 2, counts  # two envs, two JVMs, whatever the four trials
    assert len(result.samples) == 4 * 2  # two solve steps each (the step limit), no curate after the last task
