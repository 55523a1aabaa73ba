"""The benchmarks, one row each: what every part of the package needs to know about a benchmark.

Registration (`registration.ENV_IDS`, the gym ids), the backends by name (`backends.BACKENDS`), the bench's
``--env`` choices (`bench.runner.ENVS`), the data CLI (`data_cli.BENCHMARKS`) and the random agent's
fallback commands (`agents.random_agent.FALLBACK_ACTIONS`) are all derived from `TABLE`. Everything here is a
string: importing this module imports no backend and no engine.

Adding a benchmark: write its backend (`skillrise_gym/backends/<name>/`, a `Backend` subclass whose
``benchmark`` is the row's name), add its row here, its prompt profile (`prompts.PROFILES`: prompt wording
lives in prompts.py), and, when its engine needs packages, the extra in pyproject.toml.
tests/test_benchmarks_table.py checks that these agree.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    """One benchmark."""

    #: backend name (`make_backend(name)`, `SequenceEnv(name)`, ``skillrise-bench --env``, `Task.benchmark`)
    name: str
    #: the backend class, "module:Class" (imported only when asked for: `backends.backend_class`)
    backend: str
    #: the registered Gymnasium id; None: no id (the bench makes a `SequenceEnv` by backend name)
    gym_id: str | None = None
    #: the pip extra that installs its engine (``pip install 'skillrise-gym[<extra>]'``); None: nothing to install
    extra: str | None = None
    #: harmless commands the random agent draws from where the engine lists no admissible action; None: the
    #: agent's default (`agents.random_agent.DEFAULT_FALLBACK`)
    fallback_actions: tuple[str, ...] | None = None
    #: the module of its ``skillrise-data <name>`` subcommand (``add_arguments(parser)``, ``run(args)``);
    #: None: no data to set up
    datatool: str | None = None


TABLE: tuple[Benchmark, ...] = (
    Benchmark("alfworld", "skillrise_gym.backends.alfworld:ALFWorldBackend", gym_id="SkillRise-ALFWorld-v0",
              extra="alfworld", fallback_actions=("look", "inventory"),
              datatool="skillrise_gym.backends.alfworld.datatool"),
    Benchmark("webshop", "skillrise_gym.backends.webshop:WebShopBackend", gym_id="SkillRise-WebShop-v0",
              extra="webshop", fallback_actions=("click[back to search]",),
              datatool="skillrise_gym.backends.webshop.datatool"),
    Benchmark("scienceworld", "skillrise_gym.backends.scienceworld:ScienceWorldBackend",
              gym_id="SkillRise-ScienceWorld-v0", extra="scienceworld", fallback_actions=("look around", "inventory"),
              datatool="skillrise_gym.backends.scienceworld.datatool"),
    # The transfer probe: generated families of hidden rules (no data files, no engine to install).
    Benchmark("rulebook", "skillrise_gym.backends.rulebook:RulebookBackend", gym_id="SkillRise-Rulebook-v0"),
    # A tiny deterministic engine for unit tests of the layers above the backends, and for debugging: not a
    # benchmark, so no gym id.
    Benchmark("toy", "skillrise_gym.backends.toy:ToyBackend"),
)

BY_NAME: dict[str, Benchmark] = {row.name: row for row in TABLE}


def get(name: str) -> Benchmark:
    """The row of benchmark `name` (ValueError naming the known ones)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(BY_NAME)}") from None


def env_ids() -> dict[str, str]:
    """gym id -> backend name, for every row with an id."""
    return {row.gym_id: row.name for row in TABLE if row.gym_id}


def bench_envs() -> dict[str, str]:
    """bench env name -> what `vector.env_fn` makes: the gym id, or the backend name where there is none."""
    return {row.name: row.gym_id or row.name for row in TABLE}


__all__ = ["BY_NAME", "TABLE", "Benchmark", "bench_envs", "env_ids", "get"]
