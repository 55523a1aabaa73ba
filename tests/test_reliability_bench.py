"""Reliability of the bench against hostile servers and damaged run directories (an outside probe's items 4, 6,
8, 9 and 11): a request's timeout bounds its whole wall time and the shutdown, a reply nested too deeply or
too large is a malformed reply, no error shows a secret, turns store a bounded text, and `rescore` compares
counts and names a damaged file:line instead of a traceback.

The server is `tests/chat_server.py`'s `ChatServer` (fixtures `chat_server` and `server` in conftest).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chat_server import SECRET, free_port
from test_agents_openai import make_agent
from test_bench_carry import bench

from skillrise_gym.agents.base import AgentError
from skillrise_gym.bench.cli import EXIT_AGENT, EXIT_INTERRUPTED, EXIT_USAGE, main
from skillrise_gym.records import iter_jsonl, json_line

KEY_ENV = "SKILLRISE_TEST_KEY"


def run_in_thread(target, limit: float) -> tuple[list, float]:
    """Run `target` on a daemon thread (a hang must not hold the test process); (its outcome, seconds)."""
    outcome: list = []

    def body():
        try:
            outcome.append(target())
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome.append(exc)

    started = time.monotonic()
    worker = threading.Thread(target=body, daemon=True)
    worker.start()
    worker.join(limit)
    assert not worker.is_alive(), f"still running after {limit} s"
    return outcome, time.monotonic() - started


def openai_bench(server, out: Path, *extra: str) -> list[str]:
    return ["--env", "toy", "--agent", "openai", "--base-url", server.url, "--model", "tiny", "--K", "1",
            "--num-sequences", "1", "--api-key-env", KEY_ENV, "--no-progress", "--no-plots", "--env-workers", "0",
            "--out", str(out), *extra]


# ----------------------------------------------------------------- 4: --timeout bounds the whole request
def test_timeout_bounds_a_request_whose_server_drips_one_byte_at_a_time(server):
    server.always, server.drip_s = "drip", 0.2  # every read returns well within the timeout
    agent = make_agent(server.url, timeout_s=1.0, max_retries=1, backoff_s=0.01)
    outcome, spent = run_in_thread(lambda: agent.complete("hello"), limit=15)
    agent.close()
    [error] = outcome
    assert isinstance(error, AgentError) and "timeout" in str(error) and "giving up after 2 attempt(s)" in str(error)
    assert spent < 6  # two attempts of 1 s each and the backoff between them (about 2.5 s; unbounded before)


def test_the_bench_stops_within_the_retry_deadline_against_a_dripping_server(server, tmp_path, capsys):
    server.always, server.drip_s = "drip", 0.3
    out = tmp_path / "run"
    outcome, spent = run_in_thread(lambda: main(openai_bench(server, out, "--timeout", "1", "--retry-deadline", "2")),
                                   limit=30)
    assert outcome == [EXIT_AGENT] and spent < 9
    assert "timeout" in capsys.readouterr().err and (out / "summary.json").exists()


def test_close_cuts_off_a_dripping_request_and_a_long_retry_wait(server):
    server.always, server.drip_s = "drip", 0.2
    agent = make_agent(server.url, timeout_s=60.0)
    worker = threading.Thread(target=lambda: pytest.raises(AgentError, agent.complete, "hello"), daemon=True)
    worker.start()
    time.sleep(0.8)
    started = time.monotonic()
    agent.close()
    worker.join(10)
    assert not worker.is_alive() and time.monotonic() - started < 2
    # a Retry-After the client would sleep through (up to 2 minutes) ends at close too
    server.reset()
    server.always, server.retry_after = "429", "100"
    agent = make_agent(server.url, max_retries=5, retry_deadline_s=600.0)
    worker = threading.Thread(target=lambda: pytest.raises(AgentError, agent.complete, "hello"), daemon=True)
    worker.start()
    while not server.requests:
        time.sleep(0.05)
    time.sleep(0.3)
    started = time.monotonic()
    agent.close()
    worker.join(10)
    assert not worker.is_alive() and time.monotonic() - started < 2 and len(server.requests) == 1


def dripping_bench(server, out: Path, **popen) -> subprocess.Popen:
    """A bench process whose server drips its one reply (--timeout 60), returned once its request has been
    waiting for a second (killed if it never sends one)."""
    server.always, server.drip_s = "drip", 0.5
    process = subprocess.Popen([sys.executable, "-m", "skillrise_gym.bench.cli", *openai_bench(server, out, "--timeout",
                                "60")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    try:
        deadline = time.monotonic() + 60
        while not server.requests and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.requests, "the bench sent no request"
    except BaseException:
        process.kill()
        process.communicate()
        raise
    time.sleep(1.0)
    return process


def test_sigint_during_a_dripping_request_exits_promptly(server, tmp_path):
    out = tmp_path / "run"
    process = dripping_bench(server, out, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        process.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _stdout, stderr = process.communicate(timeout=20)
        assert process.returncode == EXIT_INTERRUPTED and time.monotonic() - sent < 8, stderr
        assert "Traceback" not in stderr and (out / "summary.json").exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


# ----------------------------------------------------------------- 6: deeply nested JSON
def test_a_deeply_nested_reply_is_malformed_and_asked_again(server):
    server.faults.append("deep")  # 1 MB of "[": RecursionError in any JSON parser that recurses
    agent = make_agent(server.url)
    out = agent.complete("hello")
    agent.close()
    assert out.text == server.generate("hello")[0] and out.extra["retries"] == 1
    server.always = "deep"
    agent = make_agent(server.url, max_retries=1)
    with pytest.raises(AgentError, match="nested too deeply"):
        agent.complete("hello")
    agent.close()


def test_the_bench_against_a_deeply_nested_reply_exits_3_with_a_summary(server, tmp_path, capsys):
    server.always = "deep"
    out = tmp_path / "run"
    assert main(openai_bench(server, out, "--max-retries", "1")) == EXIT_AGENT
    err = capsys.readouterr().err
    assert "nested too deeply" in err and "Traceback" not in err and (out / "summary.json").exists()


def test_a_deeply_nested_record_line_is_a_damaged_record_for_rescore_and_resume(tmp_path, capsys):
    out = tmp_path / "run"
    assert bench(out, K=(2,), n=2, carry=None) == 0
    lines = (out / "turns.jsonl").read_text().splitlines(keepends=True)
    lines.insert(1, "[" * 2**20 + "\n")
    (out / "turns.jsonl").write_text("".join(lines))
    capsys.readouterr()
    assert main(["rescore", str(out)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"{out / 'turns.jsonl'}:2 " in err and "nested too deeply" in err and len(err.strip().splitlines()) == 1
    assert bench(out, K=(2,), n=2, carry=None) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"{out / 'turns.jsonl'}:2 " in err and "nested too deeply" in err
    assert list(iter_jsonl(out / "results.jsonl"))  # untouched


def test_iter_jsonl_names_a_deeply_nested_line():
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.jsonl"
        path.write_text('{"a": 1}\n' + "[" * 2**20 + "\n" + '{"b": 2}\n')
        with pytest.raises(ValueError, match=r"t\.jsonl:2: "):
            list(iter_jsonl(path))


# ----------------------------------------------------------------- 8: no secret in any error
def test_a_server_that_echoes_the_authorization_header_shows_no_key(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    server.always = "echo"  # HTTP 400 whose message holds "Authorization: Bearer <key>"
    agent = make_agent(server.url)
    with pytest.raises(AgentError) as info:
        agent.complete("hello")
    assert "HTTP 400" in str(info.value) and "Bearer ***" in str(info.value) and SECRET not in str(info.value)
    server.always = "echo200"  # a malformed 200 body that starts with the same echo
    with pytest.raises(AgentError) as info:
        agent.complete("hello")
    agent.close()
    assert "malformed response" in str(info.value) and SECRET not in str(info.value)
    assert server.auth[-1] == f"Bearer {SECRET}"  # the key itself is still sent


def test_credentials_in_the_base_url_appear_in_no_error(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    url = server.url.replace("http://", "http://alice:pw-0123456789@")
    server.always = "echo"
    agent = make_agent(url)
    with pytest.raises(AgentError) as info:
        agent.complete("hello")
    agent.close()
    message = str(info.value)
    assert "pw-0123456789" not in message and SECRET not in message and "127.0.0.1" in message
    agent = make_agent(f"http://alice:pw-0123456789@127.0.0.1:{free_port()}/v1", max_retries=0)
    with pytest.raises(AgentError, match="cannot reach the endpoint") as info:
        agent.complete("hello")
    agent.close()
    assert "pw-0123456789" not in str(info.value) and "alice" not in str(info.value)


def test_redact_removes_keys_bearer_values_and_url_credentials():
    from skillrise_gym.agents.openai_agent import redact

    text = ('Authorization: Bearer abc.def-123 {"api_key": "k-999"} https://bob:hunter2@host/v1 sk-abcdefghijkl '
            "token=tok123 mykey-xyz")
    shown = redact(text, ["mykey-xyz"])
    for secret in ("abc.def-123", "k-999", "hunter2", "bob:", "abcdefghijkl", "tok123", "mykey-xyz"):
        assert secret not in shown
    assert "https://***@host/v1" in shown and "Bearer ***" in shown


# ----------------------------------------------------------------- 9: bounded replies and records
def test_a_reply_larger_than_the_cap_is_not_read(server):
    server.always, server.huge_bytes = "huge", 20 * 2**20  # 20 MB, over the 8 MiB default
    agent = make_agent(server.url, max_retries=1)
    with pytest.raises(AgentError, match=r"longer than 8388608 bytes"):
        agent.complete("hello")
    agent.close()


def test_a_gzip_bomb_stops_at_the_cap_once_decompressed(server):
    server.always, server.bomb_bytes = "bomb", 64 * 2**20  # about 64 KB on the wire
    agent = make_agent(server.url, max_retries=0)
    with pytest.raises(AgentError, match="once decompressed"):
        agent.complete("hello")
    agent.close()


def test_a_long_reply_is_stored_cut_and_marked(server, tmp_path):
    from skillrise_gym.bench.runner import MAX_STORED_CHARS

    server.always, server.huge_bytes = "huge", 2 * 2**20  # under the read cap: accepted, but not stored whole
    out = tmp_path / "run"
    assert main(openai_bench(server, out, "--max-task-steps", "2")) == 0
    turns = list(iter_jsonl(out / "turns.jsonl"))
    assert turns and all(len(t["response"]) == MAX_STORED_CHARS for t in turns)
    assert all(t["extra"]["truncated"]["response"] == 2 * 2**20 for t in turns)
    solve = [t for t in turns if t["role"] == "solve"]
    assert all(len(t["action"]) <= MAX_STORED_CHARS for t in solve)
    assert (out / "turns.jsonl").stat().st_size < len(turns) * 3 * MAX_STORED_CHARS
    assert main(["rescore", str(out)]) == 0


# ----------------------------------------------------------------- 11: rescore compares counts; damage is one line
@pytest.fixture
def finished_run(tmp_path) -> Path:
    out = tmp_path / "run"
    assert bench(out, K=(1, 2), n=3, carry=None) == 0
    return out


def test_rescore_with_results_jsonl_deleted_is_a_difference(finished_run, capsys):
    (finished_run / "results.jsonl").unlink()
    capsys.readouterr()
    assert main(["rescore", str(finished_run)]) == 1
    printed = capsys.readouterr().out
    assert "but no line in results.jsonl" in printed and "summary.json says 6 sequence(s) finished" in printed
    assert "0 result line(s)" in printed


def test_rescore_with_one_result_line_lost_is_a_difference(finished_run, capsys):
    path = finished_run / "results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2] + lines[3:]))
    capsys.readouterr()
    assert main(["rescore", str(finished_run)]) == 1
    printed = capsys.readouterr().out
    assert "no line in results.jsonl" in printed and "holds 5 of them" in printed


def test_rescore_with_lost_turns_is_a_difference(finished_run, capsys):
    path = finished_run / "turns.jsonl"
    turns = list(iter_jsonl(path))
    path.write_text("".join(json_line(t) for t in turns if t["extra"]["index"] != 0 or t["extra"]["K"] != 1))
    capsys.readouterr()
    assert main(["rescore", str(finished_run)]) == 1
    assert "but turns.jsonl has none" in capsys.readouterr().out


def test_a_commit_killed_between_its_two_writes_is_not_a_difference(finished_run, capsys):
    path = finished_run / "results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))  # the last sequence's turns are the file's last block
    (finished_run / "summary.json").unlink()  # a killed run has none of this session
    capsys.readouterr()
    assert main(["rescore", str(finished_run)]) == 0


def _edit_json(path: Path, edit) -> None:
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))


def _edit_line(path: Path, number: int, edit) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[number - 1] = edit(lines[number - 1])
    path.write_text("".join(lines))


def _set(field: str, value):
    def edit(line: str) -> str:
        data = json.loads(line)
        if value is KeyError:
            del data[field]
        else:
            data[field] = value
        return json_line(data)
    return edit


def _set_extra(field: str, value):
    def edit(line: str) -> str:
        data = json.loads(line)
        data["extra"][field] = value
        return json_line(data)
    return edit


DAMAGE = {
    "manifest a list": ("manifest.json", None, lambda run: _edit_json(run / "manifest.json", lambda m: [m])),
    "manifest identity a list": ("manifest.json", None, lambda run: _edit_json(
        run / "manifest.json", lambda m: {**m, "identity": [1]})),
    "manifest mode unknown": ("manifest.json", None, lambda run: _edit_json(
        run / "manifest.json", lambda m: {**m, "identity": {**m["identity"], "mode": None}})),
    "result K null": ("results.jsonl", 2, lambda run: _edit_line(run / "results.jsonl", 2, _set("K", None))),
    "result K missing": ("results.jsonl", 2, lambda run: _edit_line(run / "results.jsonl", 2, _set("K", KeyError))),
    "result not an object": ("results.jsonl", 1, lambda run: _edit_line(run / "results.jsonl", 1, lambda _l: "[1]\n")),
    "result success null": ("results.jsonl", 3, lambda run: _edit_line(run / "results.jsonl", 3,
                                                                        _set("success", None))),
    "result success too short": ("results.jsonl", 4, lambda run: _edit_line(run / "results.jsonl", 4,
                                                                             _set("success", []))),
    "turn not an object": ("turns.jsonl", 2, lambda run: _edit_line(run / "turns.jsonl", 2, lambda _l: '"x"\n')),
    "turn extra null": ("turns.jsonl", 2, lambda run: _edit_line(run / "turns.jsonl", 2, _set("extra", None))),
    "turn K null": ("turns.jsonl", 3, lambda run: _edit_line(run / "turns.jsonl", 3, _set_extra("K", None))),
    "turn position a string": ("turns.jsonl", 1, lambda run: _edit_line(run / "turns.jsonl", 1,
                                                                         _set("position", "0"))),
    "turn role unknown": ("turns.jsonl", 1, lambda run: _edit_line(run / "turns.jsonl", 1, _set("role", "x"))),
    "turn prompt missing": ("turns.jsonl", 1, lambda run: _edit_line(run / "turns.jsonl", 1,
                                                                      _set("prompt", KeyError))),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_manifest_or_record_is_one_line_naming_file_and_line(finished_run, capsys, damage):
    name, number, apply = DAMAGE[damage]
    apply(finished_run)
    capsys.readouterr()
    assert main(["rescore", str(finished_run)]) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    where = f"{finished_run / name}:{number} " if number else f"{finished_run / name}"
    assert where in err and len(err.splitlines()) == 1 and "Traceback" not in err, err


@pytest.mark.parametrize("damage", ["result K missing", "result K null", "result success null", "manifest a list",
                                    "manifest identity a list"])
def test_resume_refuses_a_damaged_result_line_or_manifest_in_one_line(finished_run, capsys, damage):
    name, number, apply = DAMAGE[damage]
    apply(finished_run)
    capsys.readouterr()
    assert bench(finished_run, K=(1, 2), n=3, carry=None) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    where = f"{finished_run / name}:{number} " if number else f"{finished_run / name}"
    assert where in err and "Traceback" not in err, err


def test_a_bench_starting_while_another_creates_the_same_new_out_gets_the_lock_message(tmp_path):
    """Two benches started at the same moment on a new --out: the second sees the first's files in flight
    (a manifest being written), and is told another process is writing, not that the folder is foreign."""
    import fcntl

    import pytest

    from skillrise_gym.bench.store import LOCK, RunDirError, RunStore

    out = tmp_path / "run"
    out.mkdir()
    holder = open(out / LOCK, "a+")
    fcntl.flock(holder.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    (out / ".manifest.json.tmp-123").write_text("{")  # the first bench's atomic write, not yet renamed
    try:
        with pytest.raises(RunDirError, match="another .* process is writing"):
            RunStore(out, {"env": "toy"}).open()
    finally:
        holder.close()
    with pytest.raises(RunDirError, match="is not a .* run directory"):  # nobody holds it: a foreign folder
        RunStore(out, {"env": "toy"}).open()
