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


def compact_observations(n: int = 2) -> list[dict]:
    """SOLVE observations of compact prompts: each carries an answer prefix ("<action>")."""
    from skillrise_gym.env import SequenceEnv

    env = SequenceEnv("toy", K=1, seed=0, prompt_style="compact")
    observations = [env.reset(seed=seed)[0] for seed in range(n)]
    env.close()
    assert all(o["answer_prefix"] == "<action>" for o in observations)
    return observations


def test_prefill_continue_sends_the_prefix_as_an_assistant_message_and_returns_prefix_plus_continuation(server):
    """Issue 42 item 3: the prefix goes as a final assistant message with vLLM's continue fields; the answer
    is the prefix plus the server's continuation of it. Observations without a prefix go as before."""
    agent = make_agent(server.url, prefill="continue")
    assert agent.can_prefill and agent.describe()["prefill"] == "continue"
    observations = compact_observations(2)
    outputs = agent.act(observations)
    sent = {r["messages"][0]["content"]: r for r in server.requests}  # sent concurrently: in any order
    assert len(server.requests) == 2
    for obs, out in zip(observations, outputs):
        request = sent[obs["prompt"]]
        continuation, prompt_tokens, completion_tokens, _ = server.generate(obs["prompt"], prefix="<action>")
        assert out.text == "<action>" + continuation and "prefix_echoed" not in out.extra
        assert out.prompt_tokens == prompt_tokens and out.completion_tokens == completion_tokens
        assert request["messages"] == [{"role": "user", "content": obs["prompt"]},
                                       {"role": "assistant", "content": "<action>"}]
        assert request["continue_final_message"] is True and request["add_generation_prompt"] is False
    server.reset()
    [full] = toy_observations(1)  # a full prompt: no prefix, so a plain request
    assert agent.act([full])[0].text == server.generate(full["prompt"])[0]
    agent.close()
    assert server.requests[0]["messages"] == [{"role": "user", "content": full["prompt"]}]
    assert "continue_final_message" not in server.requests[0] and "add_generation_prompt" not in server.requests[0]


def test_without_prefill_only_the_user_message_is_sent_and_the_prefix_is_not_added(server):
    agent = make_agent(server.url)
    assert not agent.can_prefill and "prefill" not in agent.describe()
    [obs] = compact_observations(1)
    out = agent.act([obs])[0]
    with pytest.raises(ValueError, match="prefill"):
        agent.complete(obs["prompt"], "<action>")
    agent.close()
    assert out.text == server.generate(obs["prompt"])[0]
    [request] = server.requests
    assert request["messages"] == [{"role": "user", "content": obs["prompt"]}]
    assert "continue_final_message" not in request and "add_generation_prompt" not in request


def test_prefill_continue_answers_as_the_hf_agent_does_on_the_same_model(server, tiny_model_dir):
    """The server renders the continued message as `models.encode_chat` renders a prefilled prompt, so the
    openai agent with prefill and the hf agent give the same greedy answers on compact prompts."""
    from skillrise_gym.agents.hf_agent import HFAgent, HFConfig

    observations = compact_observations(2)
    hf = HFAgent(HFConfig(model=tiny_model_dir, max_new_tokens=MAX_NEW_TOKENS, batch_size=1, threads=1,
                          prefix_cache_mb=0))
    expected = [o.text for o in hf.act(observations)]
    hf.close()
    agent = make_agent(server.url, prefill="continue", api_key_env="")
    assert [o.text for o in agent.act(observations)] == expected
    agent.close()


def test_a_server_that_echoes_the_prefix_is_not_doubled(server):
    server.echo_prefix = True
    agent = make_agent(server.url, prefill="continue")
    [obs] = compact_observations(1)
    out = agent.act([obs])[0]
    continuation = server.generate(obs["prompt"], prefix="<action>")[0]
    assert server.requests[-1]["messages"][-1] == {"role": "assistant", "content": "<action>"}
    assert out.text == "<action>" + continuation and out.extra["prefix_echoed"] is True
    server.faults.extend(["empty", "empty"])  # echoed prefix, nothing after it: an empty completion, asked again
    out = agent.complete(obs["prompt"], "<action>")
    agent.close()
    assert out.text == "<action>" and out.extra["empty_completion"] is True


def test_vllm_refuses_continue_with_a_generation_prompt(server):
    """The chat server mirrors vLLM's check: continue_final_message with add_generation_prompt (whose default is
    true) is HTTP 400, so the agent must send add_generation_prompt false, as it does above."""
    import urllib.error
    import urllib.request

    body = json.dumps({"model": "tiny", "continue_final_message": True,
                       "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<action>"}]})
    request = urllib.request.Request(server.url + "/chat/completions", body.encode(),
                                     {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 400 and "Cannot set both" in err.value.read().decode()


def test_check_prefill_refuses_agents_that_cannot_prefill_on_prefilled_prompts(tiny_model_dir):
    from skillrise_gym.agents.base import check_prefill
    from skillrise_gym.agents.expert import ExpertAgent
    from skillrise_gym.agents.hf_agent import HFAgent, HFConfig
    from skillrise_gym.agents.random_agent import RandomAgent
    from skillrise_gym.prompts import CARRY_MODES, ROLES, STYLES, answer_prefix, needs_prefill

    assert needs_prefill("compact") and not needs_prefill("full")
    for style in STYLES:  # a style needing a prefill has one for every role and carry mode
        assert needs_prefill(style) == all(answer_prefix(r, style, c) for r in ROLES for c in CARRY_MODES)
    with pytest.raises(ValueError, match="unknown prompt style"):
        needs_prefill("tiny")

    agent = make_agent("http://127.0.0.1:1/v1", api_key_env="")
    with pytest.raises(ValueError) as info:
        check_prefill(agent, "compact")
    message = str(info.value)
    assert "\n" not in message and "openai agent" in message and "'compact'" in message
    assert "--prompt-style full" in message and "--prefill continue" in message
    check_prefill(agent, "full")
    agent.close()
    with_prefill = make_agent("http://127.0.0.1:1/v1", api_key_env="", prefill="continue")
    check_prefill(with_prefill, "compact")
    with_prefill.close()
    hf = HFAgent(HFConfig(model=tiny_model_dir, threads=1, prefix_cache_mb=0))
    for able in (hf, ExpertAgent(), RandomAgent()):
        assert able.can_prefill
        check_prefill(able, "compact")
    hf.close()
    with pytest.raises(ValueError, match="prefill must be None"):
        make_agent("http://127.0.0.1:1/v1", api_key_env="", prefill="echo")
