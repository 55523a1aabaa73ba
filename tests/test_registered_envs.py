"""Every registered id, on its real engine: check_env passes and one sequence plays to its end with the
backend's expert (MiniGrid-style: one test over the whole registry)."""

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import skillrise_gym
from conftest import alfworld_data, need_data

#: per id: a small split and the options that point the backend at test data
SETTINGS = {
    "SkillRise-ALFWorld-v0": ("eval_in_distribution", lambda: {"data_dir": str(need_data(alfworld_data(), "ALFWorld game files"))}),
    "SkillRise-WebShop-v0": ("test", dict),
    "SkillRise-ScienceWorld-v0": ("test", lambda: {"tasks": ["lifespan-shortest-lived", "lifespan-longest-lived"]}),
    "SkillRise-Rulebook-v0": ("test", dict),
}


def test_every_id_has_settings_here():
    assert set(SETTINGS) == set(skillrise_gym.ENV_IDS)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", sorted(skillrise_gym.ENV_IDS))
def test_check_env_and_an_expert_sequence(env_id):
    split, options = SETTINGS[env_id]
    env = gym.make(env_id, K=2, split=split, seed=0, backend_options=options(), expert_in_info=True)
    try:
        check_env(env.unwrapped, skip_render_check=True)
        obs, info = env.reset(seed=1)
        done, steps = False, 0
        while not done and steps < 200:
            if obs["role"] == 0:
                action = info.get("expert_action") or "look"
            else:
                action = "<skill>## Workflow\n1. follow the task</skill>"
            obs, reward, done, truncated, info = env.step(action)
            assert env.observation_space.contains(obs) and not truncated
            steps += 1
        assert done and len(info["summary"]["tasks"]) == 2
        assert all(t["engine_error"] is None for t in info["summary"]["tasks"])
        assert info["summary"]["success"] == [True, True]  # these experts solve these draws (seed 1)
    finally:
        env.close()
