"""Backend options are checked against each backend's constructor when an env is made (issue 11, items 10
and 19): unknown names, wrong types (the string 'False' is not a bool), out-of-range values and an explicit
java that does not exist are refused at once with a message naming the option, through gym.make, the bench
and the trainer, before any engine starts."""

from __future__ import annotations

import shutil

import gymnasium as gym
import pytest

import skillrise_gym  # noqa: F401  (registers the env ids)
from skillrise_gym.backends import check_options


@pytest.mark.parametrize("backend, options, message", [
    ("webshop", {"human_goals": "False"}, "human_goals must be true or false, got 'False'"),
    ("webshop", {"num_products": 10**9}, "num_products must be in [1, 2000000]"),
    ("webshop", {"nosuch": 1}, "has no option 'nosuch'"),
    ("webshop", {"catalog_seed": 1.5}, "catalog_seed must be an integer"),
    ("scienceworld", {"max_action_chars": "10"}, "max_action_chars must be an integer, got '10'"),
    ("scienceworld", {"tasks": "boil"}, "tasks must be a list of strings or None"),
    ("scienceworld", {"call_timeout": float("nan")}, "call_timeout must be a finite number or None"),
    ("scienceworld", {"max_action_chars": 0}, "max_action_chars must be in [1, 1000000]"),
    ("alfworld", {"cache": "no"}, "cache must be true or false"),
    ("rulebook", {"bins": True}, "bins must be an integer, got True"),
])
def test_bad_options_are_refused_naming_the_option(backend, options, message):
    with pytest.raises(ValueError) as err:
        check_options(backend, options)
    assert message in str(err.value)


def test_good_options_pass_unchanged(tmp_path):
    options = {"call_timeout": None, "tasks": ["boil"], "max_heap": "2g", "jvm_options": ["-Xss1m"],
               "max_action_chars": 10}
    assert check_options("scienceworld", options) is options
    assert check_options("webshop", {"data_dir": tmp_path, "human_goals": False, "num_products": 50})
    assert check_options("alfworld", {"data_dir": str(tmp_path), "cache": False})
    assert check_options("toy", {"fail_to_load": ["a"]})


@pytest.mark.parametrize("env_id, options", [
    ("SkillRise-WebShop-v0", {"human_goals": "False"}),
    ("SkillRise-Rulebook-v0", {"bins": "3"}),
    ("SkillRise-Rulebook-v0", {"colours": 3}),
])
def test_gym_make_refuses_bad_options_before_any_reset(env_id, options):
    with pytest.raises(ValueError, match="option"):
        gym.make(env_id, backend_options=options)


def test_an_explicit_java_that_does_not_exist_is_an_error_not_the_system_java():
    from skillrise_gym.backends.scienceworld.jvm import JavaNotFoundError, find_java

    with pytest.raises(JavaNotFoundError, match="/nonexistent/java"):
        find_java("/nonexistent/java")
    if shutil.which("java"):
        assert find_java("java") == shutil.which("java")


def test_bench_refuses_bad_options_with_a_usage_error(tmp_path, capsys):
    from skillrise_gym.bench.cli import EXIT_USAGE, main

    code = main(["--env", "rulebook", "--agent", "random", "--K", "1", "--num-sequences", "1",
                 "--backend-option", "bins=many", "--out", str(tmp_path / "run"), "--no-progress"])
    assert code == EXIT_USAGE
    assert "rulebook option bins must be an integer, got 'many'" in capsys.readouterr().err
    assert not (tmp_path / "run" / "turns.jsonl").exists()


@pytest.mark.parametrize("argv, message", [
    (["--env", "nosuch"], "unknown backend 'nosuch'"),
    (["--lr", "nan"], "lr must be a finite number > 0"),
    (["--lr", "-1"], "lr must be a finite number > 0"),
    (["--lr", "1e30"], "lr must be at most 1"),
    (["--warmstart-lr", "5"], "warmstart_lr must be at most 1"),
    (["--warmstart-batch", "0"], "warmstart_batch must be >= 1"),
    (["--algo", "gigpo", "--step-gamma", "1.5"], "step_gamma must be in [0, 1]"),
    (["--algo", "gigpo", "--step-advantage-weight", "-1"], "step_advantage_weight must be a finite number >= 0"),
    (["--backend-options", "{bad"], "backend_options must be a JSON object"),
    (["--backend-options", "[1]"], "backend_options must be a JSON object"),
    (["--env", "rulebook", "--backend-options", '{"nosuch": 1}'], "the rulebook backend has no option 'nosuch'"),
    (["--env", "webshop", "--backend-options", '{"human_goals": "False"}'], "human_goals must be true or false"),
])
def test_train_cli_bad_flags_are_one_line_errors_with_exit_2(tmp_path, capsys, argv, message):
    pytest.importorskip("trl")
    from skillrise_train.cli import main

    code = main(argv + ["--output-dir", str(tmp_path / "out"), "--steps", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
