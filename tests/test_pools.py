"""The `skillrise_gym.pools` package: its modules import one another without a cycle, `PoolConfig` checks the
settings as `check_settings` does, `make_pool` picks the pool the config describes."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

import skillrise_gym.pools as pools
from skillrise_gym.pools import BaseEnvPool, EnvPool, PoolConfig, RayEnvPool, WorkerError, env_fn, make_pool
from skillrise_gym.pools.ray import check_settings

PACKAGE = Path(pools.__file__).parent
MODULES = ["skillrise_gym.pools", "skillrise_gym.pools.base", "skillrise_gym.pools.process",
           "skillrise_gym.pools.ray"]


def _imports(path: Path) -> set[str]:
    """The skillrise_gym modules a file imports at module level (`from X import Y` counts X, and X.Y when
    that is a module of the pools package)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names
                         if (PACKAGE / f"{alias.name}.py").exists() and node.module == "skillrise_gym.pools")
    return {name for name in found if name.startswith("skillrise_gym")}


def test_the_pool_modules_form_a_dag():
    """Each submodule imports only modules below it (base <- process, ray <- the package), never the package
    itself (that would run its __init__, which imports them)."""
    graph = {f"skillrise_gym.pools.{p.stem}": _imports(p) for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert set(graph) == {"skillrise_gym.pools.base", "skillrise_gym.pools.process", "skillrise_gym.pools.ray"}
    for module, imported in graph.items():
        assert "skillrise_gym.pools" not in imported, module
    assert not {m for m in graph["skillrise_gym.pools.base"] if m.startswith("skillrise_gym.pools")}
    assert {m for m in graph["skillrise_gym.pools.process"] if m.startswith("skillrise_gym.pools")} == {
        "skillrise_gym.pools.base"}
    assert {m for m in graph["skillrise_gym.pools.ray"] if m.startswith("skillrise_gym.pools")} == {
        "skillrise_gym.pools.base"}


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_first_in_a_fresh_interpreter(module):
    """An import cycle shows as an ImportError (a partly initialised module) when the wrong module comes first."""
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_pool_config_checks_as_check_settings_does():
    assert PoolConfig() == PoolConfig(workers=0, timeout=None, ray_address=None, ray_num_cpus=None, ray_memory=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        PoolConfig().workers = 2  # type: ignore[misc]
    bad = [dict(ray_num_cpus=1), dict(ray_memory=1e9), dict(ray_address=" "), dict(ray_address=""),
           dict(ray_address="local", ray_num_cpus=-1), dict(ray_address="local", ray_num_cpus=float("nan")),
           dict(ray_address="local", ray_memory=0), dict(ray_address="local", ray_memory="1e9")]
    for settings in bad:
        with pytest.raises(ValueError) as expected:
            check_settings(settings.get("ray_address"), settings.get("ray_num_cpus"), settings.get("ray_memory"))
        with pytest.raises(ValueError) as got:
            PoolConfig(**settings)
        assert str(got.value) == str(expected.value), settings
    config = PoolConfig(workers=3, timeout=5.0, ray_address="host:6379", ray_num_cpus=0.5, ray_memory=1.5e9)
    config.check()
    assert dataclasses.replace(config, workers=1).workers == 1


def test_make_pool_picks_the_pool_the_config_describes(monkeypatch):
    fns = [env_fn("toy", K=1)] * 3
    with make_pool(fns) as pool:
        assert type(pool) is EnvPool and pool.workers == 0 and pool.timeout is None and pool.num_envs == 3
    with make_pool(fns, PoolConfig(workers=5, timeout=7.0)) as pool:  # at most one worker per env
        assert type(pool) is EnvPool and pool.workers == 3 and pool.timeout == 7.0
        assert pool.reset(2, seed=0)[1]["position"] == 0
    made = []
    monkeypatch.setattr(pools, "RayEnvPool", lambda *args, **kwargs: made.append((args, kwargs)) or "ray pool")
    assert make_pool(fns, PoolConfig(workers=2, timeout=9.0, ray_address="local", ray_num_cpus=1,
                                     ray_memory=2e9)) == "ray pool"
    assert made == [((fns,), dict(address="local", timeout=9.0, num_cpus=1, memory=2e9))]


def test_both_pools_are_base_pools_and_a_failed_constructor_leaves_a_closed_pool():
    assert issubclass(EnvPool, BaseEnvPool) and issubclass(RayEnvPool, BaseEnvPool)
    with pytest.raises(TypeError, match="abstract"):
        BaseEnvPool([], workers=0)  # type: ignore[abstract]
    assert BaseEnvPool.unpack is pools.unpack and EnvPool.unpack({1: ("ok", "x")}) == {1: "x"}
    with pytest.raises(KeyError):
        pools.unpack({0: ("ok", 1), 1: ("error", KeyError("k"))})
    for make in (lambda: RayEnvPool([]), lambda: EnvPool([env_fn("toy", K=1)], workers=-1)):
        with pytest.raises(ValueError):
            make()
    pool = RayEnvPool.__new__(RayEnvPool)
    assert pool.closed
    pool.close()  # nothing started: nothing to do
    error = WorkerError("lost", [2], {0: ("ok", 1)})
    assert error.indices == [2] and pools.unpack(error.replies) == {0: 1}


def test_a_worker_still_importing_is_not_a_command_that_timed_out():
    """A worker's own start (spawn, imports: seconds on a loaded machine) is not timed as a command: each
    worker says it is ready first. Here its imports take longer than the pool's timeout (a flake of the
    trainer's killed-worker test on a busy machine: the first reset timed out, twice, and its trials were
    dropped); the first reset still answers. (A command that outlasts the timeout is still a hung worker:
    tests/test_train_cli.py's hung-worker test.)"""
    import slow_start_envs

    pool = EnvPool([slow_start_envs.make_toy] * 2, workers=2, timeout=slow_start_envs.IMPORT_SECONDS - 1)
    try:
        replies = pool.reset_many({0: (0, None), 1: (1, None)})
        assert set(replies) == {0, 1} and all(isinstance(obs, dict) for obs, _info in replies.values())
        assert all(proc.is_alive() for proc in pool._procs)
    finally:
        pool.close()
