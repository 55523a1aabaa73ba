"""skillrise-bench with the `openai` agent against a loopback server serving a tiny model: token accounting,
an endpoint that fails mid-run, and a run killed with SIGKILL mid-sequence, then resumed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chat_server import SECRET, free_port
from test_bench_runner import assert_consistent, results

from skillrise_gym.bench.cli import main


def wait_until_held(server, proc, count: int) -> None:
    """Wait (at most about 120 s) until the server has seen more than `count` requests or the run ended."""
    for _ in range(1200):
        if len(server.requests) > count or proc.poll() is not None:
            return
        time.sleep(0.1)


def bench_args(url: str, out: Path, n: int = 4, *extra: str) -> list[str]:
    # the tiny model answers whitespace, so every solve step is an invalid, empty action: 3 steps per task
    return ["--env", "toy", "--agent", "openai", "--base-url", url, "--model", "tiny", "--K", "1", "2",
            "--num-sequences", str(n), "--max-task-steps", "3", "--max-new-tokens", "8", "--env-workers", "1",
            "--envs", "2", "--concurrency", "2", "--api-key-env", "SKILLRISE_TEST_KEY", "--no-progress",
            "--out", str(out), *extra]


def test_openai_agent_through_the_bench_records_tokens_not_keys(server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SKILLRISE_TEST_KEY", SECRET)
    out = tmp_path / "run"
    assert main(bench_args(server.url, out, 2)) == 0
    summary = json.loads((out / "summary.json").read_text())
    block = summary["blocks"][1]
    assert block["K"] == 2 and block["prompt_tokens"] > 0 and block["completion_tokens"] > 0
    assert block["invalid_format_rate"] == 1.0  # the tiny model never writes tags
    assert len(server.requests) == 2 * 3 + 2 * 7
    for name in ("manifest.json", "summary.json", "turns.jsonl", "results.jsonl"):
        assert SECRET not in (out / name).read_text()
    assert_consistent(out, {(K, i) for K in (1, 2) for i in range(2)})


def test_endpoint_failing_mid_run_stops_cleanly_and_resumes(server, tmp_path, capsys):
    out = tmp_path / "run"
    server.fail_after = 16  # K=1 (4 x 3 calls) finishes, then K=2 fails in its first sequences
    assert main(bench_args(server.url, out, 4, "--max-retries", "1", "--timeout", "5")) == 3
    err = capsys.readouterr().err
    assert "the agent failed" in err and "HTTP 500" in err and "re-run the same command to resume" in err
    finished = results(out)
    assert {(r["K"], r["index"]) for r in finished} == {(1, i) for i in range(4)}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "agent_error" and summary["finished"] == 4

    server.fail_after = None
    assert main(bench_args(server.url, out, 4)) == 0
    assert results(out)[:4] == finished
    assert_consistent(out, {(K, i) for K in (1, 2) for i in range(4)})


def test_the_same_server_spelled_localhost_resumes(server, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(bench_args(server.url, out, 1)) == 0
    spelled = server.url.replace("127.0.0.1", "localhost") + "/"
    assert main(bench_args(spelled, out, 2)) == 0  # resumed: one more sequence per K
    assert_consistent(out, {(K, i) for K in (1, 2) for i in range(2)})
    table = (out / "summary.md").read_text()
    assert "agent s/seq" in table


def test_the_progress_bar_moves_with_every_model_call(server, tmp_path, capsys):
    args = [a for a in bench_args(server.url, tmp_path / "run", 1) if a != "--no-progress"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "calls=" in err and "tok/s=" in err


def test_endpoint_down_records_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    url = f"http://127.0.0.1:{free_port()}/v1"
    assert main(bench_args(url, out, 2, "--max-retries", "1")) == 3
    assert "cannot reach the endpoint" in capsys.readouterr().err
    assert not (out / "results.jsonl").exists() and not (out / "turns.jsonl").exists()


def test_killed_run_resumes_with_no_duplicate_and_no_lost_sequence(server, tmp_path):
    out = tmp_path / "run"
    # K=1: 4 sequences x 3 calls = 12; K=2: 7 calls a sequence, 2 in flight. After 12 + 14 + 1 requests the
    # server holds every request: 6 sequences are finished, 2 are in flight when the process is killed.
    server.hold_after = 27
    command = [sys.executable, "-m", "skillrise_gym.bench.cli", *bench_args(server.url, out, 4)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until_held(server, proc, 27)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert len(server.requests) > 27
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stderr.close()
    assert proc.returncode == -9
    before = results(out)
    assert {(r["K"], r["index"]) for r in before} == {(1, i) for i in range(4)} | {(2, 0), (2, 1)}
    orphan_turns = (out / "turns.jsonl").read_text().count("\n")
    assert orphan_turns == 4 * 3 + 2 * 7  # nothing of the in-flight sequences was written

    server.release.set()
    server.hold_after = None
    requests_before = len(server.requests)
    assert main(bench_args(server.url, out, 4)) == 0
    assert results(out)[: len(before)] == before
    assert_consistent(out, {(K, i) for K in (1, 2) for i in range(4)})
    assert len(server.requests) - requests_before == 2 * 7  # only the two lost sequences were played again


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_stops_cleanly_and_resumes(server, tmp_path, signum):
    out = tmp_path / "run"
    server.hold_after = 27  # as above: 6 sequences finished, 2 in flight when the signal comes
    command = [sys.executable, "-m", "skillrise_gym.bench.cli", *bench_args(server.url, out, 4, "--timeout", "2")]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until_held(server, proc, 27)
        assert proc.poll() is None
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 130, stderr.decode()[-2000:]
    assert b"interrupted; re-run the same command to resume" in stderr
    assert b"model call(s) in flight end within their timeout" in stderr  # what the shutdown waits for
    assert b"| 1 | 4 |" in stdout  # the table of what finished
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["finished"] == 6

    server.release.set()
    server.hold_after = None
    assert main(bench_args(server.url, out, 4)) == 0
    assert_consistent(out, {(K, i) for K in (1, 2) for i in range(4)})
