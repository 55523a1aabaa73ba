"""Carry modes of SequenceEnv: skill (the document), none (nothing crosses), reflect (a list of reflections)."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import skillrise_gym  # noqa: F401
from skillrise_gym import prompts


def run(env, answer):
    obs, info = env.reset(seed=0)
    roles, prompts_seen, done = [], [], False
    while not done:
        roles.append(int(obs["role"]))
        prompts_seen.append(obs["prompt"])
        obs, _, done, _, info = env.step(answer(obs))
    return roles, prompts_seen, info


def expert_or(text):
    return lambda obs: f"<action>{obs['admissible_actions'][0]}</action>" if obs["role"] == 0 else text


def test_carry_none_plays_every_task_without_curate_turns():
    env = gym.make("SkillRise-Rulebook-v0", K=3, carry="none")
    roles, shown, info = run(env.unwrapped, expert_or("unused"))
    assert roles == [0, 0, 0]
    assert all("Skills: (none yet)" in p for p in shown)
    assert [t["position"] for t in info["summary"]["tasks"]] == [0, 1, 2] and info["carry"] == "none"
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_carry_reflect_lists_every_earlier_reflection():
    env = gym.make("SkillRise-Rulebook-v0", K=3, carry="reflect", prompt_style="full")
    roles, shown, info = run(env.unwrapped, expert_or("thinking <remark>glass goes in the blue bin</remark>"))
    assert roles == [0, 1, 0, 1, 0]
    assert "<remark></remark>" in shown[1] and "Reflect on this attempt" in shown[1]
    assert prompts.NO_EXPERIENCE_PLACEHOLDER in shown[0]
    assert shown[2].count("you noted: glass goes in the blue bin") == 1
    assert shown[4].count("you noted: glass goes in the blue bin") == 2
    assert "After earlier task 2" in shown[4] and "## Current Skill Document" not in shown[4]
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_reflect_keeps_raw_text_without_tags_and_flags_it():
    env = gym.make("SkillRise-Rulebook-v0", K=2, carry="reflect")
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(obs["admissible_actions"][0])
    obs, _, _, _, info = env.step("bins are by material")
    assert not info["format_valid"] and "you noted: bins are by material" in obs["skill_document"]
    assert "you noted: bins are by material" in obs["prompt"]
    env.close()


def test_carry_skill_is_the_default_and_unchanged():
    env = gym.make("SkillRise-Rulebook-v0", K=2)
    roles, shown, info = run(env.unwrapped, expert_or("<skill>metal -> yellow bin</skill>"))
    assert roles == [0, 1, 0] and "Skills: metal -> yellow bin" in shown[2] and info["carry"] == "skill"
    env.close()


@pytest.mark.parametrize("kwargs, message", [
    ({"carry": "memory"}, "unknown carry mode"),
    ({"prompt_style": "terse"}, "unknown prompt style"),
    ({"carry": "none", "curate_after_last": True}, "curate_after_last"),
])
def test_bad_carry_and_style_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make("SkillRise-Rulebook-v0", K=2, **kwargs)


def test_reflect_needs_a_reflect_prompt(monkeypatch):
    monkeypatch.setitem(prompts.PROFILES, "rulebook", dataclasses.replace(prompts.PROFILES["rulebook"], reflect=False))
    with pytest.raises(ValueError, match="needs a reflect prompt"):
        gym.make("SkillRise-Rulebook-v0", K=2, carry="reflect")


def test_a_starting_document_needs_carry_skill():
    env = gym.make("SkillRise-Rulebook-v0", K=2, carry="none")
    with pytest.raises(ValueError, match="carry='skill'"):
        env.reset(options={"skill_document": "x"})
    env.close()
