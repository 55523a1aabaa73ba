"""Signals under load (issue 46, item 12): a bench given SIGTERM or Ctrl-C exits at once, whatever the load.

CPython runs a signal's Python handler (Ctrl-C's KeyboardInterrupt, the bench's SIGTERM handler) only in the
main thread, between bytecodes. Its C handler may run on another thread (the kernel delivers a process's
signal to any thread that does not block it), or just before the main thread enters a blocking wait; either
way a wait without a timeout (a future's `result()`, a pipe's `poll`/`recv`) holds the main thread until it
ends: until the request in flight ends (its --timeout, and its retries: for ever against a server that holds
requests), or until an env answers. `signal_on_another_thread` makes exactly that happen on purpose: the
signal is sent to a helper thread, so its C handler runs there.

What else an interrupted run did after the signal, measured on a loaded machine (2 cores, 6 CPU burners,
fresh caches; the `[SIGTERM]` case of tests/test_bench_resume.py): 5-7 s importing matplotlib and drawing the
plots (more on a fresh machine that builds its font cache), then 1.3 s of interpreter teardown (the last
garbage collections walk every object the run made). Both are gone from the interrupted path.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types
from pathlib import Path

import pytest
from test_agents_openai import make_agent
from test_bench_carry import Learner, learner_config
from test_reliability_bench import dripping_bench

import skillrise_gym.bench
from skillrise_gym.bench.cli import EXIT_INTERRUPTED
from skillrise_gym.bench.runner import run_bench
from skillrise_gym.pools import EnvPool, env_fn

ROOT = Path(__file__).resolve().parents[1]
POSIX = pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="POSIX signals")


class Stop(Exception):
    """What the test's signal handler raises (in the main thread, when its Python handler runs)."""


def _stop(signum: int, frame: object) -> None:
    raise Stop()


@pytest.fixture
def stop_on_sigusr1():
    previous = signal.signal(signal.SIGUSR1, _stop)
    yield
    signal.signal(signal.SIGUSR1, previous)


def signal_on_another_thread(signum: int, after: float) -> list[float]:
    """Send `signum` to a helper thread of this process after `after` seconds: its C handler runs there, and
    only the main thread's next bytecode runs its Python handler (what a signal delivered to another thread,
    or arriving just before the main thread starts a blocking wait, amounts to). Returns the list that gets
    the time it was sent."""
    sent: list[float] = []

    def fire() -> None:
        time.sleep(after)
        sent.append(time.monotonic())
        signal.pthread_kill(threading.get_ident(), signum)

    threading.Thread(target=fire, daemon=True).start()
    return sent


# ----------------------------------------------------------------- the main thread's waits
@POSIX
def test_the_agent_hands_the_main_thread_back_while_a_request_runs(server, stop_on_sigusr1):
    server.always, server.drip_s = "drip", 0.2  # a request that lasts until its timeout
    agent = make_agent(server.url, timeout_s=10.0, max_retries=0)
    try:
        sent = signal_on_another_thread(signal.SIGUSR1, after=0.8)
        with pytest.raises(Stop):
            agent.act([{"prompt": "hello"}, {"prompt": "again"}])
        # before: the main thread waited in Future.result() until the request's 10 s timeout
        assert time.monotonic() - sent[0] < 2
    finally:
        agent.close()


@POSIX
@pytest.mark.parametrize("call", ["step", "receive"])
def test_a_wait_for_an_env_worker_hands_the_main_thread_back(stop_on_sigusr1, call):
    with EnvPool([env_fn("toy", K=1)], workers=1, timeout=15.0) as pool:
        pool.reset(0, seed=0)
        worker = pool._procs[0].pid
        os.kill(worker, signal.SIGSTOP)  # an env that takes its time to answer
        try:
            sent = signal_on_another_thread(signal.SIGUSR1, after=0.5)
            with pytest.raises(Stop):
                if call == "step":
                    pool.step(0, "look")
                else:
                    pool.submit_steps({0: "look"})
                    pool.receive()
            # before: the main thread waited in the pipe's poll until the pool's 15 s timeout
            assert time.monotonic() - sent[0] < 2
        finally:
            os.kill(worker, signal.SIGCONT)


def _tgkill() -> object | None:
    """glibc's tgkill(pid, tid, signal): a signal to one thread of another process (None without it)."""
    if not sys.platform.startswith("linux"):
        return None
    return getattr(ctypes.CDLL(None, use_errno=True), "tgkill", None)


@pytest.mark.skipif(_tgkill() is None, reason="needs Linux's tgkill")
def test_a_sigterm_handled_on_another_thread_of_the_bench_stops_it_at_once(server, tmp_path):
    """The bench's SIGTERM, with its C handler run on one of the bench's other threads (the kernel may pick
    any): the main thread waits for a dripping request (--timeout 60); before, it stayed there until then."""
    out = tmp_path / "run"
    process = dripping_bench(server, out, cwd=ROOT)
    try:
        others = [int(t) for t in os.listdir(f"/proc/{process.pid}/task") if int(t) != process.pid]
        assert others, "the bench has no thread besides the main one"
        assert _tgkill()(process.pid, max(others), signal.SIGTERM) == 0
        sent = time.monotonic()
        _stdout, stderr = process.communicate(timeout=20)
        assert process.returncode == EXIT_INTERRUPTED and time.monotonic() - sent < 8, stderr
        assert "Traceback" not in stderr and "interrupted; re-run the same command" in stderr
        assert (out / "summary.json").exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


# ----------------------------------------------------------------- what the interrupted path does
def test_an_interrupted_run_draws_no_plots(tmp_path, monkeypatch):
    drawn: list[str] = []
    names = ("plot_success_by_position", "plot_success_vs_K", "plot_carry_success_by_position",
             "plot_carry_success_vs_K")
    stub = types.SimpleNamespace(**{name: (lambda summary, path, title="", name=name: drawn.append(name))
                                    for name in names})
    monkeypatch.setitem(sys.modules, "skillrise_gym.bench.plots", stub)
    monkeypatch.setattr(skillrise_gym.bench, "plots", stub, raising=False)
    done = run_bench(learner_config(tmp_path / "done", ["skill"], K=[1], num_sequences=2, plots=True), Learner())
    assert done.status == "complete" and len(drawn) == 2  # a run that completes draws its plots
    drawn.clear()
    for carry in (["skill"], ["skill", "none"]):
        out = tmp_path / "-".join(carry)
        outcome = run_bench(learner_config(out, carry, plots=True), Learner(stop_after=12))
        assert outcome.status == "interrupted" and outcome.summary["finished"] > 0
        assert (out / "summary.json").exists() and (out / "summary.md").exists()
        assert drawn == [], f"an interrupted run drew {drawn}"  # before: matplotlib imported and both drawn


EXITING = textwrap.dedent("""
    import atexit, gc, sys
    atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, flush=True))  # runs last
    from skillrise_gym.bench import cli

    made = cli.make_agent

    def interrupting(args, benchmark):  # the random agent, stopped by Ctrl-C at its 4th call
        agent = made(args, benchmark)
        act, calls = agent.act, []

        def act_then_stop(observations, infos=None):
            calls.append(1)
            if len(calls) > 3:
                raise KeyboardInterrupt
            return act(observations, infos)

        agent.act = act_then_stop
        return agent

    cli.make_agent = interrupting
    sys.exit(cli.main(sys.argv[1:]))
""")


def test_an_interrupted_bench_skips_the_heap_walk_of_the_interpreter_teardown(tmp_path):
    out = tmp_path / "run"
    run = subprocess.run([sys.executable, "-c", EXITING, "--env", "toy", "--agent", "random", "--K", "1",
                          "--num-sequences", "4", "--env-workers", "0", "--no-progress", "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == EXIT_INTERRUPTED, run.stderr[-2000:]
    assert "interrupted; re-run the same command to resume" in run.stderr
    assert "frozen at exit: True" in run.stdout  # before: False, and teardown walked the whole heap


def test_a_signal_while_setting_up_is_one_line_and_exit_130(tmp_path, monkeypatch, capsys):
    from skillrise_gym.bench import cli

    def interrupted(args, benchmark):
        raise KeyboardInterrupt  # Ctrl-C while a model loads

    monkeypatch.setattr(cli, "make_agent", interrupted)
    out = tmp_path / "run"
    try:
        status = cli.main(["--env", "toy", "--agent", "random", "--K", "1", "--out", str(out)])
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main(): a traceback instead of one line and exit 130")
    assert status == EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert "interrupted before the run began; nothing was written" in err and not out.exists()
