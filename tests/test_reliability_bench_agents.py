"""Reliability of the bench's agents and flags (issue 46, items 6, 9 and part of 13): a key in --base-url's query
string is sent but never recorded or shown, a bad port or host is one line, a completion that echoes a key is
redacted before it is recorded; --timeout bounds a request and all its redirects together; numbers that would
crash later are refused when the command is read (one line, exit 2, nothing written).

The server is `tests/chat_server.py`'s `ChatServer` (fixtures `chat_server` and `server` in conftest).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chat_server import SECRET, free_port
from test_agents_openai import make_agent
from test_reliability_bench import KEY_ENV, openai_bench, run_in_thread

from skillrise_gym.agents.base import AgentError
from skillrise_gym.bench.cli import EXIT_OK, EXIT_USAGE, main

QUERY_SECRET = "qs-0123456789abcdef"


def recorded_text(out: Path) -> str:
    """Everything the run wrote, as one text."""
    return "\n".join(p.read_text(errors="replace") for p in sorted(out.rglob("*")) if p.is_file())


# ----------------------------------------------------------------- 6: a key in --base-url's query string
@pytest.mark.parametrize("param", ["api_key", "key", "token"])
def test_a_key_in_the_base_urls_query_is_sent_but_never_recorded_or_shown(server, tmp_path, capsys, param):
    out = tmp_path / "run"
    url = f"{server.url}?{param}={QUERY_SECRET}"
    assert main(openai_bench(server, out, "--max-task-steps", "2") + ["--base-url", url]) == EXIT_OK
    printed = capsys.readouterr()
    assert server.queries and all(q == f"{param}={QUERY_SECRET}" for q in server.queries)  # the server got it
    for name in ("manifest.json", "summary.json", "turns.jsonl", "results.jsonl"):
        assert QUERY_SECRET not in (out / name).read_text(), name
    assert QUERY_SECRET not in recorded_text(out) and QUERY_SECRET not in printed.err + printed.out
    recorded = json.loads((out / "manifest.json").read_text())["identity"]["agent"]["base_url"]
    assert recorded == f"http://localhost:{server.url.split(':')[2].split('/')[0]}/v1?{param}=***"
    # a resume with another key is the same run (the key is no part of what is measured)
    other = url.replace(QUERY_SECRET, "qs-another-key-0000")
    assert main(openai_bench(server, out, "--max-task-steps", "2") + ["--base-url", other]) == EXIT_OK


def test_errors_show_no_key_of_the_query_string(server, capsys):
    server.always = "echo"  # HTTP 400 whose message holds the request's path (and query)
    agent = make_agent(f"{server.url}?key={QUERY_SECRET}")
    with pytest.raises(AgentError) as info:
        agent.complete("hello")
    agent.close()
    assert "HTTP 400" in str(info.value) and QUERY_SECRET not in str(info.value)
    agent = make_agent(f"http://127.0.0.1:{free_port()}/v1?api_key={QUERY_SECRET}", max_retries=0)
    with pytest.raises(AgentError, match="cannot reach the endpoint") as info:
        agent.complete("hello")
    agent.close()
    assert QUERY_SECRET not in str(info.value) and "api_key=***" in str(info.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/v1", "http://127.0.0.1:http/v1", "http://[::1/v1",
                                 "http:///v1", "http://:8000/v1", "http://exa mple.com/v1",
                                 f"http://127.0.0.1:99999/v1?api_key={QUERY_SECRET}"])
def test_a_bad_port_or_host_in_the_base_url_is_one_line_and_nothing_is_written(tmp_path, capsys, url):
    out = tmp_path / "run"
    args = ["--env", "toy", "--agent", "openai", "--base-url", url, "--model", "tiny", "--K", "1",
            "--num-sequences", "1", "--no-progress", "--out", str(out), "--max-retries", "0", "--timeout", "5"]
    assert main(args) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "--base-url" in err, err
    assert QUERY_SECRET not in err and not out.exists()


def test_a_completion_that_echoes_a_key_is_recorded_redacted(server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(KEY_ENV, SECRET)
    server.always = "echokey"  # the completion holds the query string and the Authorization header
    out = tmp_path / "run"
    url = f"{server.url}?api_key={QUERY_SECRET}"
    assert main(openai_bench(server, out, "--max-task-steps", "2") + ["--base-url", url]) == EXIT_OK
    capsys.readouterr()
    turns = [json.loads(line) for line in (out / "turns.jsonl").read_text().splitlines()]
    assert turns and all("query api_key=***" in t["response"] and "auth Bearer ***" in t["response"] for t in turns)
    assert all(t["extra"]["agent"].get("redacted") for t in turns)
    text = recorded_text(out)
    assert SECRET not in text and QUERY_SECRET not in text
    assert server.auth[-1] == f"Bearer {SECRET}"  # the key itself is still sent
    assert main(["rescore", str(out)]) == 0


# ----------------------------------------------------------------- 9: one deadline for a request and its redirects
def test_timeout_bounds_a_request_and_all_its_redirects(server):
    server.always, server.slow_s = "redirect", 0.4  # each hop answers 307 after 0.4 s: a redirect loop
    agent = make_agent(server.url, timeout_s=1.0, max_retries=0)
    outcome, spent = run_in_thread(lambda: agent.complete("hello"), limit=60)
    agent.close()
    [error] = outcome
    assert isinstance(error, AgentError) and "timeout" in str(error), error
    assert "giving up after 1 attempt(s)" in str(error)  # the hops are one request, not retries
    # one deadline of 1 s (cut within a poll slice); a fresh timeout per hop took 21 hops x 0.4 s = 8.4 s
    assert spent < 5 and len(server.requests) <= 4


def test_a_redirect_that_ends_is_one_request_not_a_retry(server):
    server.faults.append("redirect")
    server.slow_s = 0.0
    agent = make_agent(server.url, timeout_s=10.0, max_retries=3)
    out = agent.complete("hello")
    agent.close()
    assert out.text == server.generate("hello")[0]
    assert "retries" not in out.extra and agent.stats["retries"] == 0 and len(server.requests) == 2


# ----------------------------------------------------------------- 13: numbers refused when the command is read
OPENAI = ["--agent", "openai", "--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--max-retries", "0"]
HF = ["--agent", "hf", "--model", "tiny"]
BAD_NUMBERS = {
    "max-task-steps -3": (["--agent", "expert", "--max-task-steps", "-3"], "--max-task-steps"),
    "max-task-steps 0": (["--agent", "expert", "--max-task-steps", "0"], "--max-task-steps"),
    "env-timeout nan": (["--agent", "expert", "--env-timeout", "nan"], "--env-timeout"),
    "worker-timeout nan": (["--agent", "expert", "--worker-timeout", "nan"], "--env-timeout"),
    "env-timeout inf": (["--agent", "expert", "--env-timeout", "inf"], "--env-timeout"),
    "env-timeout 0": (["--agent", "expert", "--env-timeout", "0"], "--env-timeout"),
    "worker-timeout 0": (["--agent", "expert", "--worker-timeout", "0", "--env-workers", "1"], "--env-timeout"),
    "env-timeout -1": (["--agent", "expert", "--env-timeout", "-1"], "--env-timeout"),
    "max-new-tokens 0": ([*OPENAI, "--max-new-tokens", "0"], "--max-new-tokens"),
    "max-tokens 0": ([*OPENAI, "--max-tokens", "0"], "--max-new-tokens"),
    "hf max-new-tokens -1": ([*HF, "--max-new-tokens", "-1"], "--max-new-tokens"),
    "timeout inf": ([*OPENAI, "--timeout", "inf"], "--timeout"),
    "timeout nan": ([*OPENAI, "--timeout", "nan"], "--timeout"),
    "timeout 0": ([*OPENAI, "--timeout", "0"], "--timeout"),
    "temperature -1": ([*OPENAI, "--temperature", "-1"], "--temperature"),
    "temperature nan": ([*HF, "--temperature", "nan"], "--temperature"),
    "temperature inf": ([*OPENAI, "--temperature", "inf"], "--temperature"),
    "top-p 0": ([*OPENAI, "--top-p", "0"], "--top-p"),
    "top-p 1.5": ([*HF, "--top-p", "1.5"], "--top-p"),
    "top-p nan": ([*OPENAI, "--top-p", "nan"], "--top-p"),
    "concurrency 0": ([*OPENAI, "--concurrency", "0"], "--concurrency"),
    "batch-size 0": ([*HF, "--batch-size", "0"], "--batch-size"),
    "max-prompt-tokens 0": ([*HF, "--max-prompt-tokens", "0"], "--max-prompt-tokens"),
    "retry-deadline -1": ([*OPENAI, "--retry-deadline", "-1"], "--retry-deadline"),
    "retry-deadline nan": ([*OPENAI, "--retry-deadline", "nan"], "--retry-deadline"),
    "retry-deadline inf": ([*OPENAI, "--retry-deadline", "inf"], "--retry-deadline"),
    "max-retries -1": ([*OPENAI, "--max-retries", "-1"], "--max-retries"),
    "threads -2": ([*HF, "--threads", "-2"], "--threads"),
    "prefix-cache-mb -1": ([*HF, "--prefix-cache-mb", "-1"], "--prefix-cache-mb"),
}


@pytest.mark.parametrize("case", list(BAD_NUMBERS))
def test_numbers_that_would_crash_later_are_refused_in_one_line_before_anything_is_written(tmp_path, capsys, case):
    flags, named = BAD_NUMBERS[case]
    out = tmp_path / "run"
    code = main(["--env", "toy", "--K", "1", "--num-sequences", "1", "--no-progress", "--out", str(out), *flags])
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if "warning:" not in line]  # (a renamed flag warns)
    assert code == EXIT_USAGE and len(lines) == 1 and named in lines[0] and "Traceback" not in err, err
    assert "re-run" not in err and not out.exists()
