"""SequenceEnv's phase machine, tags, spaces and bad inputs, on the toy backend (no engine needed here)."""

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import skillrise_gym
from skillrise_gym.backends.toy import ToyBackend
from skillrise_gym.env import ROLE_CURATE, ROLE_SOLVE, SequenceEnv
from skillrise_gym.prompts import EMPTY_SKILL_PLACEHOLDER
from skillrise_gym.tasks import Task


def play(env, solve, curate="<skill>doc</skill>", seed=None, options=None):
    """Play one sequence; return (list of (obs, reward, terminated, info) per step, reset info)."""
    obs, info = env.reset(seed=seed, options=options)
    steps, done = [], False
    while not done:
        action = solve(env, obs) if obs["role"] == ROLE_SOLVE else curate
        obs, reward, done, truncated, step_info = env.step(action)
        assert truncated is False
        steps.append((obs, reward, done, step_info))
    return steps, info


def expert(env, obs):
    return env.unwrapped.expert_action()


def test_phase_machine_solve_curate_alternate_and_no_curate_after_last():
    env = SequenceEnv("toy", K=3, seed=0)
    steps, info = play(env, expert)
    roles = [s[3]["role"] for s in steps]
    positions = [s[3]["position"] for s in steps]
    assert roles.count("curate") == 2 and roles[-1] == "solve"
    # solve steps of position p, then one curate tagged p, then position p+1
    assert positions == sorted(positions)
    for i, role in enumerate(roles):
        if role == "curate":
            assert roles[i - 1] == "solve" and steps[i - 1][3]["task_done"]
    rewards = [s[1] for s in steps]
    assert sum(rewards) == 3.0 and all(r == 0 for r, role in zip(rewards, roles) if role == "curate")
    summary = steps[-1][3]["summary"]
    assert summary["success"] == [True, True, True]
    assert [t["task_id"] for t in summary["tasks"]] == info["task_ids"]


def test_curate_after_last_adds_a_final_curate():
    env = SequenceEnv("toy", K=2, seed=0, curate_after_last=True)
    steps, _ = play(env, expert)
    assert [s[3]["role"] for s in steps][-1] == "curate"


def test_info_tags_every_transition():
    env = SequenceEnv("toy", K=2, seed=3)
    steps, info = play(env, expert)
    for _, _, _, step_info in steps:
        for key in ("role", "position", "task_id", "family", "sequence_id", "success", "score", "step_index",
                    "action", "format_valid", "task_done"):
            assert key in step_info
        assert step_info["sequence_id"] == info["sequence_id"]


def test_step_limit_ends_a_task_as_failure_and_sequence_continues():
    env = SequenceEnv("toy", K=2, seed=0, max_task_steps=3)
    steps, _ = play(env, lambda e, o: "look")
    solve_steps = [s for s in steps if s[3]["role"] == "solve"]
    assert len(solve_steps) == 6 and all(s[1] == 0.0 for s in solve_steps)
    assert steps[-1][3]["summary"]["success"] == [False, False]
    assert [s[3]["step_index"] for s in solve_steps] == [1, 2, 3, 1, 2, 3]


def test_skill_document_flows_to_the_next_task_and_is_capped():
    env = SequenceEnv("toy", K=3, seed=1, skill_char_limit=50)
    obs, _ = env.reset()
    assert obs["skill_document"] == "" and EMPTY_SKILL_PLACEHOLDER in obs["prompt"]
    while obs["role"] == ROLE_SOLVE:
        obs, *_ = env.step(env.expert_action())
    assert obs["role"] == ROLE_CURATE and "Outcome: SUCCESS" in obs["prompt"] and obs["task"] in obs["prompt"]
    obs, _, _, _, info = env.step("thinking...\n<skill>" + "x" * 500 + "</skill>")
    assert info["format_valid"] and obs["skill_document"] == "x" * 50 and obs["role"] == ROLE_SOLVE
    assert "x" * 50 in obs["prompt"]
    while obs["role"] == ROLE_SOLVE:
        obs, *_ = env.step(env.expert_action())
    obs, _, _, _, info = env.step("no tags, the whole text is the document")
    assert not info["format_valid"] and obs["skill_document"] == "no tags, the whole text is the document"


def test_empty_curate_keeps_empty_document_shown_as_placeholder():
    env = SequenceEnv("toy", K=2, seed=1)
    obs, _ = env.reset(options={"skill_document": "old"})
    while obs["role"] == ROLE_SOLVE:
        obs, *_ = env.step(env.expert_action())
    obs, *_ = env.step("<skill>   </skill>")
    assert obs["skill_document"] == "" and EMPTY_SKILL_PLACEHOLDER in obs["prompt"]


def test_action_tags_are_honoured_in_solve():
    env = SequenceEnv("toy", K=1, seed=0)
    env.reset(options={"task_ids": ["red-train-0"]})  # a one-press task
    target = env.expert_action()
    _, reward, done, _, info = env.step(f"I think so.\n<action>{target}</action> done")
    assert reward == 1.0 and done and info["format_valid"] and info["action"] == target


@pytest.mark.parametrize(
    "answer, valid",
    [("<action>{t}</action>", True), ("<action><action>{t}</action></action>", False), ("<action>{t}", False),
     ("{t}", False), ("<ACTION>{t}\nmore text", False)],
)
def test_the_engine_gets_the_command_prompts_parse_action_reads(answer, valid):
    """One rule for every answer shape (prompts.parse_action): nested, unclosed or untagged answers still
    send the command, never a tag, and only the well-formed one counts as valid."""
    env = SequenceEnv("toy", K=1, seed=0)
    env.reset(options={"task_ids": ["red-train-0"]})
    target = env.expert_action()
    _, reward, done, _, info = env.step(answer.format(t=target.upper()))
    assert (info["action"], info["format_valid"], reward) == (target, valid, 1.0)


@pytest.mark.parametrize(
    "action, expected",
    [("", "empty"), ("   \n\t", "empty"), ("a" * 1_000_000, "too_long"), ("\x00\x01\x02", "empty")],
)
def test_bad_solve_actions_are_not_sent_and_count_as_steps(action, expected):
    env = SequenceEnv("toy", K=1, seed=0)
    env.reset()
    obs, reward, done, _, info = env.step(action)
    assert info["invalid_action"] == expected and info["step_index"] == 1 and reward == 0.0
    assert obs["observation"].startswith("Invalid action") and env.observation_space.contains(obs)


def test_control_characters_are_removed_from_commands():
    env = SequenceEnv("toy", K=1, seed=0)
    env.reset(options={"task_ids": ["red-train-0"]})
    target = env.expert_action()
    _, reward, *_ , info = env.step(target.replace(" ", " \x07", 1) + "\x1b")
    assert info["action"] == target.replace(" ", " ", 1) and reward == 1.0


def test_binary_and_huge_curate_text_is_sanitised_and_capped():
    env = SequenceEnv("toy", K=2, seed=0)
    obs, _ = env.reset()
    while obs["role"] == ROLE_SOLVE:
        obs, *_ = env.step(env.expert_action())
    junk = bytes(range(256)).decode("latin-1") * 5000
    obs, *_ = env.step(junk)
    assert len(obs["skill_document"]) <= 4000 and "\x00" not in obs["skill_document"]
    assert env.observation_space.contains(obs)


def test_non_string_action_step_before_reset_and_after_end():
    env = SequenceEnv("toy", K=1, seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("look")
    env.reset(options={"task_ids": ["red-train-0"]})
    with pytest.raises(TypeError, match="expected str"):
        env.step(b"look")
    with pytest.raises(TypeError):
        env.step(None)
    env.step(env.expert_action())
    with pytest.raises(RuntimeError, match="has ended"):
        env.step("look")


def test_reset_with_new_seed_mid_episode_abandons_and_reseeds():
    env = SequenceEnv("toy", K=2, seed=0)
    _, first = env.reset(seed=5)
    env.step("look")
    _, second = env.reset(seed=9)
    assert second["abandoned_sequence"] == first["sequence_id"]
    fresh = SequenceEnv("toy", K=2)
    _, again = fresh.reset(seed=9)
    assert again["sequence_id"] == second["sequence_id"]  # the new seed alone decides the draw


def test_seed_kwarg_and_reset_seed_reproduce_sequence_streams():
    ids = lambda env: [env.reset()[1]["sequence_id"] for _ in range(5)]  # noqa: E731
    assert ids(SequenceEnv("toy", K=2, seed=4)) == ids(SequenceEnv("toy", K=2, seed=4))
    env = SequenceEnv("toy", K=2)
    first = env.reset(seed=4)[1]["sequence_id"]
    assert first == SequenceEnv("toy", K=2, seed=4).reset()[1]["sequence_id"]


def test_pinned_task_ids_and_family_options():
    env = SequenceEnv("toy", K=2, seed=0)
    _, info = env.reset(options={"task_ids": ["blue-train-4", "blue-train-0"]})
    assert info["task_ids"] == ["blue-train-4", "blue-train-0"]
    _, info = env.reset(options={"family": "red"})
    assert info["family"] == "red"
    with pytest.raises(ValueError, match="unknown task id"):
        env.reset(options={"task_ids": ["blue-train-4", "nope"]})
    with pytest.raises(ValueError, match="K=2"):
        env.reset(options={"task_ids": ["blue-train-4"]})
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"taskids": []})
    with pytest.raises(ValueError, match="unknown family"):
        env.reset(options={"family": "purple"})


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"split": "validation"}, ValueError, "unknown split"),
        ({"mode": "shuffle"}, ValueError, "unknown mode"),
        ({"K": 0}, ValueError, "positive integer"),
        ({"K": -2}, ValueError, "positive integer"),
        ({"max_task_steps": 0}, ValueError, "max_task_steps"),
        ({"backend": "nethack"}, ValueError, "unknown backend"),
        ({"backend": 3}, TypeError, "backend must be"),
    ],
)
def test_bad_constructor_arguments(kwargs, error, message):
    args = {"backend": "toy", **kwargs}
    with pytest.raises(error, match=message):
        SequenceEnv(**args)


def test_k_larger_than_every_family_and_unknown_family_fail_at_first_reset():
    with pytest.raises(ValueError, match="larger than every family"):
        SequenceEnv("toy", K=50).reset()
    with pytest.raises(ValueError, match="unknown family"):
        SequenceEnv("toy", K=2, family="purple").reset()


def test_repeat_mode_replays_one_task():
    env = SequenceEnv("toy", K=3, mode="repeat", seed=0)
    steps, info = play(env, expert)
    assert len(set(info["task_ids"])) == 1 and info["mode"] == "repeat"


def test_engine_error_ends_task_as_failure_and_sequence_goes_on():
    crash = Task("toy", "red-crash", "red", 3.0, "train",
                 {"colour": "red", "sequence": ["press old red switch"] * 3})
    backend = ToyBackend(extra_tasks=[crash])
    env = SequenceEnv(backend, K=2, seed=0)
    obs, _ = env.reset(options={"task_ids": ["red-crash", "red-train-0"]})
    obs, reward, done, _, info = env.step("look")
    obs, reward, done, _, info = env.step("look")
    assert info["engine_error"] and info["task_done"] and not info["success"] and reward == 0.0
    assert obs["role"] == ROLE_CURATE
    obs, reward, done, _, info = env.step("<skill>x</skill>")
    while not done:
        obs, reward, done, _, info = env.step(env.expert_action())
    assert done and info["summary"]["tasks"][0]["engine_error"] and info["summary"]["success"] == [False, True]


def test_observations_are_in_the_space_and_check_env_passes():
    env = SequenceEnv("toy", K=2, seed=0)
    check_env(env, skip_render_check=True)
    steps, _ = play(env, expert, seed=1)
    assert all(env.observation_space.contains(s[0]) for s in steps)
    assert "TextSpace(max_length=" in repr(env.observation_space)  # readable, unlike a giant charset


def test_unicode_and_punctuation_are_in_the_text_space():
    env = SequenceEnv("toy", K=1)
    assert env.action_space.contains("go to café #3, then <look>!\n")
    assert not env.action_space.contains(b"bytes")
    assert isinstance(env.action_space.sample(), str)


def test_render_ansi_returns_the_prompt():
    env = SequenceEnv("toy", K=1, seed=0, render_mode="ansi")
    obs, _ = env.reset()
    assert env.render() == obs["prompt"]


def test_registered_ids_and_unknown_id():
    assert set(skillrise_gym.ENV_IDS) <= set(gym.registry)
    with pytest.raises(gym.error.Error):
        gym.make("SkillRise-NetHack-v0")


@pytest.mark.parametrize("env_id", sorted(skillrise_gym.ENV_IDS))
def test_every_registered_id_makes_without_starting_its_engine(env_id):
    """Construction is cheap and validates arguments; the engine starts at the first reset."""
    env = gym.make(env_id, K=2)
    assert env.unwrapped._backend is None
    assert env.unwrapped.benchmark == skillrise_gym.ENV_IDS[env_id]  # the backend of its row in benchmarks.TABLE
    with pytest.raises(ValueError, match="unknown split"):
        gym.make(env_id, split="no-such-split")
    env.close()


def test_import_is_light():
    import subprocess, sys

    code = "import sys, skillrise_gym; print(sorted(m for m in ('torch','transformers','textworld','alfworld','scienceworld','bm25s') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_gymnasium_vector_envs_accept_sequence_envs():
    envs = gym.vector.SyncVectorEnv([lambda: SequenceEnv("toy", K=2) for _ in range(2)])
    obs, infos = envs.reset(seed=3)
    assert list(obs["role"]) == [0, 0] and len(obs["prompt"]) == 2
    obs, rewards, terminated, truncated, infos = envs.step(("look", "look"))
    assert rewards.shape == (2,) and not terminated.any()
    envs.close()


def test_reset_of_a_k1_sequence_whose_task_fails_to_load_says_the_sequence_is_over():
    from skillrise_gym.backends.toy import ToyBackend
    from skillrise_gym.env import SequenceEnv

    env = SequenceEnv(ToyBackend(fail_to_load=["red-train-0"]), K=1)
    obs, info = env.reset(options={"task_ids": ["red-train-0"]})
    assert info["sequence_done"] is True
    assert "could not load" in info["summary"]["tasks"][0]["engine_error"]
    assert "Engine error while loading" in obs["observation"]
    with pytest.raises(RuntimeError, match="has ended"):
        env.step("<action>look</action>")
    _, info = env.reset(options={"task_ids": ["red-train-1"]})
    assert "sequence_done" not in info
