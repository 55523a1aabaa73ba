"""The `openai` agent against a real HTTP server on loopback serving a tiny model's actual generations.

The server is `tests/chat_server.py`'s `ChatServer` (fixtures `chat_server` and `server` in conftest).
"""

from __future__ import annotations

import json

import pytest

from chat_server import MAX_NEW_TOKENS, SECRET, free_port
from skillrise_gym.agents.base import AgentError
from skillrise_gym.agents.openai_agent import OpenAIAgent, OpenAIConfig


def make_agent(url: str, **overrides) -> OpenAIAgent:
    settings = dict(base_url=url, model="tiny", api_key_env="SKILLRISE_TEST_KEY", max_tokens=MAX_NEW_TOKENS,
                    timeout_s=5.0, max_retries=3, backoff_s=0.01, concurrency=2)
    settings.update(overrides)
    return OpenAIAgent(OpenAIConfig(**settings))


def toy_observations(n: int = 3) -> list[dict]:
    from skillrise_gym.env import SequenceEnv

    env = SequenceEnv("toy", K=1, seed=0)
    observations = []
    for seed in range(n):
        obs, _ = env.reset(seed=seed)
        observations.append(obs)
    env.close()
    return observations


def test_generations_are_the_models_and_usage_is_recorded(server, monkeypatch):
    monkeypatch.setenv("SKILLRISE_TEST_KEY", SECRET)
    agent = make_agent(server.url)
    observations = toy_observations(3)
    outputs = agent.act(observations)
    agent.close()
    assert len(outputs) == 3
    for obs, out in zip(observations, outputs):
        expected, prompt_tokens, completion_tokens, _ = server.generate(obs["prompt"])
        assert out.text == expected
        assert out.prompt_tokens == prompt_tokens > 0
        assert out.completion_tokens == completion_tokens
    assert server.auth == [f"Bearer {SECRET}"] * 3
    assert all(r["messages"][0]["role"] == "user" and len(r["messages"]) == 1 for r in server.requests)
    assert SECRET not in json.dumps(agent.describe())


@pytest.mark.parametrize("fault", ["500", "429", "malformed", "slow"])
def test_transient_faults_are_retried(server, fault):
    server.faults.extend([fault, fault])
    server.slow_s = 1.0
    agent = make_agent(server.url, timeout_s=0.4 if fault == "slow" else 5.0)
    [obs] = toy_observations(1)
    out = agent.complete(obs["prompt"])
    agent.close()
    assert out.text == server.generate(obs["prompt"])[0]
    assert out.extra["retries"] == 2
    assert len(server.requests) == 3


@pytest.mark.parametrize("fault, words", [("500", "HTTP 500"), ("malformed", "malformed response"),
                                          ("slow", "timeout"), ("429", "HTTP 429")])
def test_persistent_faults_give_up_with_a_clear_error(server, fault, words):
    server.always = fault
    server.slow_s = 0.6
    agent = make_agent(server.url, max_retries=1, timeout_s=0.3)
    with pytest.raises(AgentError, match=words) as info:
        agent.complete("hello")
    agent.close()
    assert "giving up after 2 attempt(s)" in str(info.value)
    assert len(server.requests) == 2


def test_client_errors_are_not_retried_and_never_show_the_key(server, monkeypatch):
    monkeypatch.setenv("SKILLRISE_TEST_KEY", SECRET)
    server.always = "401"
    agent = make_agent(server.url)
    with pytest.raises(AgentError) as info:
        agent.complete("hello")
    agent.close()
    message = str(info.value)
    assert "HTTP 401" in message and "invalid api key" in message and "$SKILLRISE_TEST_KEY" in message
    assert SECRET not in message
    assert len(server.requests) == 1


def test_empty_completion_is_asked_again_then_accepted(server):
    agent = make_agent(server.url, empty_retries=1)
    server.faults.extend(["empty"])
    out = agent.complete("hello")
    assert out.text == server.generate("hello")[0] and "empty_completion" not in out.extra
    server.faults.extend(["empty", "empty"])
    out = agent.complete("hello")
    agent.close()
    assert out.text == "" and out.extra["empty_completion"] is True



def test_endpoint_down_gives_up_with_a_clear_error():
    agent = make_agent(f"http://127.0.0.1:{free_port()}/v1", max_retries=2)
    with pytest.raises(AgentError, match="cannot reach the endpoint"):
        agent.complete("hello")
    agent.close()
    # the deadline stops the client's retries too, and the error still says what failed
    agent = make_agent(f"http://127.0.0.1:{free_port()}/v1", max_retries=100, retry_deadline_s=0.8)
    with pytest.raises(AgentError, match=r"giving up after \d+ attempt\(s\).*cannot reach the endpoint") as err:
        agent.complete("hello")
    agent.close()
    assert err.value.resumable and agent.stats["requests"] < 5


def test_retry_after_is_waited_for_unless_it_runs_past_the_deadline(server):
    import time

    server.faults.append("429")
    server.retry_after = "1"
    agent = make_agent(server.url)
    started = time.monotonic()
    out = agent.complete("hello")
    assert out.extra["retries"] == 1 and time.monotonic() - started >= 1.0
    agent.close()
    server.always, server.retry_after = "429", "30"
    agent = make_agent(server.url, max_retries=100, retry_deadline_s=10.0)
    started = time.monotonic()
    with pytest.raises(AgentError, match=r"giving up after 1 attempt\(s\).*HTTP 429") as err:
        agent.complete("hello")
    agent.close()
    assert err.value.resumable and time.monotonic() - started < 5 and len(server.requests) == 2 + 1


def test_a_wrong_path_is_not_resumable_and_says_what_to_check(server):
    agent = make_agent(server.url.removesuffix("/v1"))
    with pytest.raises(AgentError, match=r"HTTP 404.*--base-url") as err:
        agent.complete("hello")
    agent.close()
    assert not err.value.resumable and len(server.requests) == 1


def test_only_the_named_variable_supplies_a_key(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ambient")  # the client's own fallback must not send it
    monkeypatch.delenv("SKILLRISE_TEST_KEY", raising=False)
    agent = make_agent(server.url)
    agent.complete("hello")
    agent.close()
    assert server.auth == [None]


def test_close_stops_the_retries_of_running_calls(server):
    import threading
    import time

    server.always = "500"
    agent = make_agent(server.url, max_retries=100)
    errors = []
    worker = threading.Thread(target=lambda: errors.append(pytest.raises(AgentError, agent.complete, "hello")))
    worker.start()
    time.sleep(0.2)
    agent.close()
    worker.join(timeout=15)
    assert not worker.is_alive() and errors and len(server.requests) <= 2
    assert agent.in_flight() == 0 and agent._client._client.is_closed


def test_a_missing_openai_package_names_the_fix(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(ImportError, match=r"skillrise-gym\[bench\].*pip install openai"):
        make_agent("http://127.0.0.1:1/v1")


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="http"):
        make_agent("localhost:8000")
    with pytest.raises(ValueError, match="--model"):
        make_agent("http://127.0.0.1:1/v1", model="")


def test_a_key_with_a_trailing_newline_is_stripped_and_sent(server, monkeypatch):
    monkeypatch.setenv("SKILLRISE_TEST_KEY", SECRET + "\n")
    agent = make_agent(server.url)
    agent.complete("hello")
    agent.close()
    assert server.auth[-1] == f"Bearer {SECRET}"


@pytest.mark.parametrize("key, kind", [(SECRET[:6] + "\n" + SECRET[6:], "whitespace or control"),
                                       (SECRET + "é", "non-ASCII"), ("sk-ключ", "non-ASCII")])
def test_a_key_no_header_can_carry_is_refused_up_front_without_showing_it(monkeypatch, key, kind):
    monkeypatch.setenv("SKILLRISE_TEST_KEY", key)
    with pytest.raises(ValueError) as info:
        make_agent("http://127.0.0.1:1/v1")
    message = str(info.value)
    assert "$SKILLRISE_TEST_KEY" in message and kind in message
    assert key.strip() not in message and SECRET[:6] not in message and "ключ" not in message


def test_a_missing_key_warns_once_and_requests_go_without_one(server, monkeypatch):
    import warnings

    from skillrise_gym.agents import openai_agent

    monkeypatch.setattr(openai_agent, "_warned_missing", set())
    monkeypatch.setenv("SKILLRISE_TEST_KEY", "  ")
    with pytest.warns(UserWarning, match=r"\$SKILLRISE_TEST_KEY is unset or empty"):
        agent = make_agent(server.url)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_agent(server.url).close()  # the second agent does not warn again
    agent.complete("hello")
    agent.close()
    assert server.auth[-1] is None


def test_a_restarting_server_is_waited_for_within_the_retry_deadline(server):
    """Issue 11 item 13: retries run to a total deadline (default 10 minutes, a server restart), not a
    handful of quick attempts; past the deadline the error says how long it tried."""
    import threading
    import time

    [obs] = toy_observations(1)
    server.always = "500"
    threading.Timer(1.5, lambda: setattr(server, "always", None)).start()  # "restarted" after 1.5 s
    agent = make_agent(server.url, max_retries=100, retry_deadline_s=60.0, backoff_s=0.05)
    started = time.monotonic()
    out = agent.complete(obs["prompt"])
    agent.close()
    assert out.extra["retries"] >= 2 and time.monotonic() - started >= 1.4
    server.always = "500"
    agent = make_agent(server.url, max_retries=100, retry_deadline_s=0.5, backoff_s=0.05)
    with pytest.raises(AgentError, match=r"giving up after \d+ attempt\(s\) in \d+ s.*HTTP 500") as err:
        agent.complete(obs["prompt"])
    agent.close()
    assert err.value.resumable


def test_an_unknown_model_is_not_resumable_and_the_bench_says_so(server, tmp_path, capsys):
    from skillrise_gym.bench.cli import EXIT_AGENT, main

    server.always = "400"
    [obs] = toy_observations(1)
    agent = make_agent(server.url)
    with pytest.raises(AgentError, match="does not exist") as err:
        agent.complete(obs["prompt"])
    agent.close()
    assert not err.value.resumable and len(server.requests) == 1  # not retried
    code = main(["--env", "toy", "--agent", "openai", "--base-url", server.url, "--model", "nosuch", "--K", "1",
                 "--num-sequences", "1", "--api-key-env", "SKILLRISE_TEST_KEY", "--no-progress",
                 "--out", str(tmp_path / "run")])
    err_text = capsys.readouterr().err
    assert code == EXIT_AGENT and "would fail the same way" in err_text
    assert "re-run the same command to resume" not in err_text


@pytest.mark.parametrize("system_prompt", ["", "Answer in tags."])
def test_a_system_prompt_is_sent_before_every_prompt(server, system_prompt):
    agent = make_agent(server.url, system_prompt=system_prompt)
    agent.act(toy_observations(2))
    agent.close()
    assert all(r["messages"][0] == {"role": "system", "content": system_prompt} and r["messages"][1]["role"] == "user"
               for r in server.requests)
    assert agent.describe()["system_prompt"] == system_prompt


def test_the_endpoint_is_compared_as_one_server_however_it_is_spelled():
    from skillrise_gym.agents.openai_agent import normalize_base_url

    same = ["http://127.0.0.1:8000/v1", "http://localhost:8000/v1/", "HTTP://LocalHost:8000/v1", "http://[::1]:8000/v1"]
    assert {normalize_base_url(u) for u in same} == {"http://localhost:8000/v1"}
    assert normalize_base_url("https://user:pw@api.example.com/v1") == "https://api.example.com/v1"
    assert normalize_base_url("http://localhost:8001/v1") != normalize_base_url("http://localhost:8000/v1")


def test_every_model_call_reaches_the_progress_callback(server):
    agent = make_agent(server.url)
    seen = []
    agent.on_call = seen.append
    outputs = agent.act(toy_observations(3))
    agent.close()
    assert len(seen) == 3 and sorted(o.text for o in seen) == sorted(o.text for o in outputs)
