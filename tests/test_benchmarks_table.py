"""The benchmark table (`skillrise_gym.benchmarks.TABLE`) and everything derived from it agree: ids, backends,
prompt profiles, extras, data tools, the bench's env names, the random agent's fallbacks. (Each id is made
with `gym.make` in tests/test_env.py, and played on its engine in tests/test_registered_envs.py.)"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import skillrise_gym
from skillrise_gym import benchmarks, data_cli, prompts
from skillrise_gym.agents.random_agent import DEFAULT_FALLBACK, FALLBACK_ACTIONS, RandomAgent
from skillrise_gym.backends import BACKENDS, backend_class
from skillrise_gym.bench.runner import ENVS

ROWS = {row.name: row for row in benchmarks.TABLE}


def test_names_and_ids_are_unique():
    assert len(ROWS) == len(benchmarks.TABLE) and benchmarks.BY_NAME == ROWS
    ids = [row.gym_id for row in benchmarks.TABLE if row.gym_id]
    assert len(set(ids)) == len(ids)
    with pytest.raises(ValueError, match="unknown benchmark 'nethack'"):
        benchmarks.get("nethack")


def test_the_old_names_are_derived_from_the_table():
    assert skillrise_gym.ENV_IDS == {row.gym_id: row.name for row in benchmarks.TABLE if row.gym_id}
    assert BACKENDS == {row.name: (row.backend, row.extra) for row in benchmarks.TABLE}
    assert ENVS == {row.name: row.gym_id or row.name for row in benchmarks.TABLE} == benchmarks.bench_envs()
    assert data_cli.BENCHMARKS == tuple(row.name for row in benchmarks.TABLE if row.datatool)
    assert FALLBACK_ACTIONS == {row.name: row.fallback_actions for row in benchmarks.TABLE if row.fallback_actions}


@pytest.mark.parametrize("name", list(ROWS))
def test_every_row_has_a_backend_and_a_prompt_profile(name):
    cls = backend_class(name)  # imports the backend's module, not its engine
    assert cls.benchmark == name
    assert isinstance(prompts.profile(name), prompts.Profile)
    assert name in prompts.PROFILES


def test_every_prompt_profile_has_a_row():
    assert set(prompts.PROFILES) == set(ROWS)


@pytest.mark.parametrize("name", [row.name for row in benchmarks.TABLE if row.gym_id])
def test_every_id_is_registered_for_its_backend(name):
    spec = gym.spec(ROWS[name].gym_id)
    assert spec.entry_point == "skillrise_gym.env:SequenceEnv" and spec.kwargs == {"backend": name}


def test_every_extra_is_in_pyproject():
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    in_all = {name for spec in extras["all"] for name in spec.split("[", 1)[1].rstrip("]").split(",")}
    for row in benchmarks.TABLE:
        if row.extra is not None:
            assert extras.get(row.extra), f"{row.name}: no extra {row.extra!r} in pyproject.toml"
            assert row.extra in in_all, f"{row.name}: the extra {row.extra!r} is not in skillrise-gym[all]"


def test_every_data_tool_exists():
    for row in benchmarks.TABLE:
        if row.datatool is not None:
            assert importlib.util.find_spec(row.datatool) is not None, row.datatool


def test_data_cli_has_a_subcommand_per_data_tool(capsys):
    with pytest.raises(SystemExit):
        data_cli.main(["--help"])
    usage = capsys.readouterr().out
    assert "{" + ",".join([*data_cli.BENCHMARKS, "model"]) + "}" in usage


def test_the_random_agent_falls_back_on_the_rows_commands():
    observation = {"role": 0, "position": 0, "admissible_actions": []}
    for name in ROWS:
        output = RandomAgent(seed=0, benchmark=name).act([observation])[0]
        command = prompts.parse_action(output.text, name).action
        assert command in (ROWS[name].fallback_actions or DEFAULT_FALLBACK) and output.extra == {"fallback": True}


def test_the_table_imports_no_backend():
    code = ("import sys, skillrise_gym.benchmarks; "
            "print(sorted(m for m in sys.modules if m.startswith('skillrise_gym.backends')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
