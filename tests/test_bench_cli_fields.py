"""`skillrise-bench`'s flags come from `BenchConfig`'s fields (`cli_fields`): each default, type and help is
stated once, on the field, and the flags users pass are the ones there always were."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

import pytest

from skillrise_gym.bench import cli
from skillrise_gym.bench.runner import BenchConfig
from skillrise_gym.cli_fields import add_arguments, default_of, field_values, flag_fields, flag_name, option
from skillrise_gym.pools import PoolConfig

#: every flag of `skillrise-bench` (its --help before the flags came from BenchConfig, and --prefix-cache-mb,
#: --end-on-success, --episode, --prefill, --panel, --memory (--carry's other name), --freeze-after,
#: --documents-from, --price and the curator's since)
FLAGS = ["-h", "--version", "--env", "--agent", "--K", "--mode", "--num-sequences", "--split", "--seed", "--panel",
         "--max-task-steps", "--family", "--backend-option", "--memory", "--freeze-after", "--documents-from",
         "--prompt-style", "--end-on-success", "--price", "--out", "--episode",
         "--env-workers", "--envs",
         "--env-timeout", "--ray-address", "--ray-num-cpus", "--ray-memory", "--overlap", "--no-progress", "--no-plots",
         "--report-to",
         "--model", "--base-model", "--temperature", "--top-p", "--max-new-tokens", "--base-url", "--api-key-env",
         "--timeout", "--max-retries", "--retry-deadline", "--system-prompt", "--concurrency", "--prefill", "--curator-model",
         "--curator-agent", "--batch-size",
         "--max-prompt-tokens", "--device", "--dtype", "--threads", "--prefix-cache-mb"]


#: former names, still accepted for one release with a warning (the trainer's names won)
RENAMED = {"--workers": "--env-workers", "--parallel": "--envs", "--worker-timeout": "--env-timeout",
           "--max-tokens": "--max-new-tokens"}


def _actions() -> dict[str, argparse.Action]:
    """The flags --help shows."""
    return {action.option_strings[0]: action for action in cli.build_parser()._actions
            if action.help is not argparse.SUPPRESS}


def test_the_bench_and_the_trainer_name_the_same_settings_alike_and_old_names_warn(capsys):
    from skillrise_train.cli import build_parser as train_parser

    trainer = {a.option_strings[0] for a in train_parser()._actions}
    assert set(RENAMED.values()) <= trainer and set(RENAMED.values()) <= set(_actions())
    hidden = {s for a in cli.build_parser()._actions if a.help is argparse.SUPPRESS for s in a.option_strings}
    assert set(RENAMED) <= hidden
    old = cli.build_parser().parse_args(["--env", "toy", "--agent", "hf", "--out", "o", "--workers", "3",
                                         "--parallel", "2", "--worker-timeout", "9", "--max-tokens", "7"])
    new = cli.build_parser().parse_args(["--env", "toy", "--agent", "hf", "--out", "o", "--env-workers", "3",
                                         "--envs", "2", "--env-timeout", "9", "--max-new-tokens", "7"])
    assert vars(old) == vars(new)
    err = capsys.readouterr().err
    for name, now in RENAMED.items():
        assert f"warning: {name} is now {now}" in err
    assert "warning" not in " ".join(cli.build_parser().format_help().split())
    # the bench parses a command line twice (the flags given, for a saved episode's defaults): one warning
    assert cli.given_flags(cli.build_parser(), ["--workers", "2"]) == {"workers"}
    assert "warning" not in capsys.readouterr().err


def test_the_flags_are_the_same_and_every_benchconfig_field_but_max_attempts_has_one():
    assert list(_actions()) == FLAGS
    with_flag = {f.name for f in flag_fields(BenchConfig)}
    init = {f.name for f in dataclasses.fields(BenchConfig) if f.init}
    # no flag: the pool's replay limit, and what a saved episode sets (bench.cli.saved_episode)
    assert init - with_flag == {"max_attempts", "admissible_actions", "episode_from"}


def test_the_cli_defaults_are_benchconfigs():
    actions = _actions()
    config = BenchConfig(env="toy", out="unused")
    for f in flag_fields(BenchConfig):
        action = actions[flag_name(f)]
        assert action.dest == f.name and action.help == f.metadata["help"]
        if f.name == "out":
            assert action.required and default_of(f) is dataclasses.MISSING
        elif f.name == "env":  # a saved episode names it (`cli.main`): required of the command line there
            assert not action.required and action.default is None and default_of(f) is dataclasses.MISSING
        elif f.name == "backend_options":
            assert action.default == [] and f.metadata["parse"](action.default) == default_of(f) == {}
        else:
            assert action.default == default_of(f), f.name
    args = cli.build_parser().parse_args(["--env", "toy", "--agent", "expert", "--out", "unused"])
    parsed = BenchConfig(**field_values(args, BenchConfig))
    assert parsed == config  # every default, as BenchConfig's own (split etc. resolved the same way)
    assert args.K == [1, 2, 4, 6] and args.worker_timeout == 600.0 and args.workers == 1 and args.progress


def test_the_flags_parse_into_benchconfig_as_before():
    args = cli.build_parser().parse_args([
        "--env", "toy", "--agent", "random", "--out", "o", "--K", "3", "1", "--mode", "repeat", "--num-sequences",
        "2", "--seed", "4", "--max-task-steps", "3", "--backend-option", "hang_on=[]", "--carry", "none", "skill",
        "--env-workers", "0", "--envs", "3", "--env-timeout", "5", "--ray-address", "local", "--ray-num-cpus",
        "0.5", "--ray-memory", "1e9", "--no-progress", "--no-plots"])
    config = BenchConfig(**field_values(args, BenchConfig))
    assert (config.K, config.mode, config.num_sequences, config.seed) == ([1, 3], "repeat", 2, 4)
    assert config.max_task_steps == 3
    assert config.backend_options == {"hang_on": []} and config.carry == ["none", "skill"]
    assert (config.workers, config.parallel, config.worker_timeout) == (0, 3, 5.0)
    assert config.pool == PoolConfig(workers=0, timeout=5.0, ray_address="local", ray_num_cpus=0.5, ray_memory=1e9)
    assert not config.progress and not config.plots
    with pytest.raises(ValueError, match="--backend-option expects KEY=VALUE"):
        field_values(cli.build_parser().parse_args(["--env", "toy", "--agent", "expert", "--out", "o",
                                                    "--backend-option", "novalue"]), BenchConfig)


def test_field_types_become_flag_types():
    @dataclass
    class Config:
        name: str = option(help="required")
        sizes: list[int] = option([1], "several ints")
        limit: float | None = option(None, "a float or nothing")
        quiet: bool = option(False, "a switch")
        fancy: bool = option(True, "no fancy", flag="--plain")
        hidden: int = option(3, "no flag", cli=False)

    parser = argparse.ArgumentParser()
    add_arguments(parser, Config, ["name", "sizes", "limit", "quiet", "fancy"])
    values = field_values(parser.parse_args(["--name", "x", "--sizes", "2", "3", "--limit", "0.5", "--quiet",
                                             "--plain"]), Config)
    assert Config(**values) == Config("x", [2, 3], 0.5, True, False, 3)
    assert Config(**field_values(parser.parse_args(["--name", "y"]), Config)) == Config("y")
    with pytest.raises(ValueError, match="not a field with a flag"):
        add_arguments(argparse.ArgumentParser(), Config, ["hidden"])
