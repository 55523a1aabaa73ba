"""Text that crosses the env boundary (issue 11: lone surrogates, C1 controls, Unicode line separators) is
cleaned before it reaches an engine or a document, and every record stays writable."""

from __future__ import annotations

import json

import gymnasium as gym

import skillrise_gym  # noqa: F401  (registers the ids)
from skillrise_gym.agents.base import AgentOutput
from skillrise_gym.agents.expert import ExpertAgent
from skillrise_gym.prompts import clean_text
from skillrise_gym.records import iter_jsonl, json_line, read_turns, write_jsonl

HOSTILE = "\udcff\x85\x9b\u2028\u2029\x00\x1b"


def test_clean_text_drops_surrogates_and_controls_and_keeps_line_breaks():
    assert clean_text("a\udcffb\x9bc") == "abc"
    assert clean_text("a\x85b\u2028c\u2029d") == "a\nb\nc\nd"
    assert clean_text("tab\tnew\nline é ü 中") == "tab\tnew\nline é ü 中"
    clean_text(HOSTILE).encode("utf-8")  # always encodable


def test_actions_and_documents_are_cleaned_at_the_env_boundary():
    env = gym.make("SkillRise-Rulebook-v0", K=2, backend_options={"rules": 1, "bins": 3})
    try:
        env.reset(seed=0)
        answer = env.unwrapped.backend.expert_action()
        colour = answer.split()[0]
        _, _, _, _, info = env.step(f"<action>{colour}\udcff bin{HOSTILE}</action>")
        assert info["success"]  # the engine saw the clean command
        step = env.unwrapped.records[0].history[0]
        step.action.encode("utf-8")
        obs, _, _, _, _ = env.step(f"<skill>{colour}\x85goes\u2028first\udcff{HOSTILE}</skill>")
        assert obs["skill_document"].startswith(f"{colour}\ngoes\nfirst")
        for text in (obs["skill_document"], obs["prompt"]):
            text.encode("utf-8")
            assert not set(text) & set("\udcff\x85\x9b\u2028\u2029\x00\x1b")
    finally:
        env.close()


def test_a_record_with_a_lone_surrogate_is_written_and_reads_back(tmp_path):
    line = json_line({"response": "ok\udcff"})
    line.encode("utf-8")
    assert json.loads(line) == {"response": "ok\udcff"}
    assert json_line({"response": "été"}) == '{"response": "été"}\n'  # readable text stays readable
    path = tmp_path / "t.jsonl"
    write_jsonl(path, [{"response": "x\ud800y"}])
    assert list(iter_jsonl(path)) == [{"response": "x\ud800y"}]


class SurrogateExpert(ExpertAgent):
    """The expert's answers with a lone surrogate appended: a broken model reply."""

    def act(self, observations, infos=None):
        return [AgentOutput(o.text + "\udcff", prompt_tokens=o.prompt_tokens, completion_tokens=o.completion_tokens)
                for o in super().act(observations, infos)]


def test_the_bench_records_a_reply_with_a_lone_surrogate_and_finishes(tmp_path):
    from skillrise_gym.bench.runner import BenchConfig, run_bench

    config = BenchConfig(env="toy", out=str(tmp_path / "run"), K=[2], num_sequences=3, progress=False, plots=False)
    outcome = run_bench(config, SurrogateExpert())
    assert outcome.status == "complete"
    turns = read_turns(tmp_path / "run" / "turns.jsonl")
    assert turns and all(t.response.endswith("\udcff") for t in turns)  # the raw reply is kept, escaped
    assert run_bench(config, SurrogateExpert()).status == "complete"  # a rerun resumes cleanly
