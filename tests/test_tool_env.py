"""SkillRise envs through TRL's environment API (skillrise_gym/tool_env.py): the tool protocol on the real
rulebook engine, the refusals, and one step of stock GRPO with the example (examples/trl_environment_factory.py)."""

from __future__ import annotations

import importlib.util
import inspect

import pytest

from skillrise_gym.backends.base import MissingDependencyError
from skillrise_gym.tool_env import ToolEnvironment, environment_factory


def test_a_sequence_plays_through_the_tools_and_its_reward_counts_the_solved_tasks():
    env = environment_factory("SkillRise-Rulebook-v0", K=2, expert_in_info=False)()
    first = env.reset()
    assert "Answer by calling the act tool" in first
    assert env.write_skills("notes") == "The task is still going: call act with a command."
    unwrapped = env.env.unwrapped
    after = env.act(unwrapped.expert_action())  # the backend's expert solves the task
    assert "Call the write_skills tool" in after
    assert env.act("red bin").startswith("The task has ended")
    env.write_skills("glass items go in the blue bin")
    assert unwrapped.skill_document == "glass items go in the blue bin"  # what the next task sees
    ended = env.act(unwrapped.expert_action())
    assert ended == "The sequence is over: 2 of 2 tasks solved." and env.get_reward() == 2.0
    assert env.act("anything") == "The sequence is over: nothing more to do."
    env.reset()
    assert env.get_reward() == 0.0
    # TRL offers every public method but reset and get_reward as a tool: exactly the two, documented
    tools = [n for n, _ in inspect.getmembers(ToolEnvironment, inspect.isfunction)
             if not n.startswith("_") and n not in ("reset", "get_reward")]
    assert tools == ["act", "write_skills"]
    from transformers.utils import get_json_schema

    assert get_json_schema(ToolEnvironment.act)["function"]["parameters"]["required"] == ["command"]


def test_factories_draw_other_sequences_and_bad_ids_or_missing_extras_are_refused(monkeypatch):
    factory = environment_factory("SkillRise-Rulebook-v0", K=2)
    assert factory().reset() != factory().reset()
    # a dataset row's seed picks the sequence: the G generations of one prompt play the same one
    assert factory().reset(seed=5, prompt=[]) == factory().reset(seed=5, prompt=[]) != factory().reset(seed=6)
    with pytest.raises(ValueError, match="unknown env id 'SkillRise-Chess-v0'"):
        environment_factory("SkillRise-Chess-v0")
    from skillrise_gym import extras

    real = importlib.util.find_spec
    monkeypatch.setattr(extras.importlib.util, "find_spec", lambda name: None if name == "scienceworld" else real(name))
    with pytest.raises(MissingDependencyError, match=r"SkillRise-ScienceWorld-v0 needs scienceworld, from the "
                                                     r"scienceworld extra: pip install 'skillrise-gym\[scienceworld\]'"):
        environment_factory("SkillRise-ScienceWorld-v0")


def test_the_example_trains_one_step_of_stock_grpo(capsys):
    pytest.importorskip("trl")
    import runpy
    from pathlib import Path

    example = runpy.run_path(str(Path(__file__).resolve().parent.parent / "examples" / "trl_environment_factory.py"))
    assert example["main"]([]) == 0
    assert "one step of stock GRPO on SkillRise-Rulebook-v0: loss" in capsys.readouterr().out
