"""Backward-compatible alias: the env pools moved to `skillrise_gym.pools` (`EnvPool` to `pools.process`).

This module re-exports their names, so ``from skillrise_gym.vector import EnvPool, WorkerError, env_fn,
make_pool`` keeps working; new code imports them from `skillrise_gym.pools`. Its `make_pool` still takes the
settings as keywords (``make_pool(fns, workers=2, timeout=600.0, ray_address=...)``), or a `PoolConfig`.
To patch what a pool uses (in tests), patch the module that defines it, in `skillrise_gym.pools`.
"""

from __future__ import annotations

from typing import Sequence

from skillrise_gym.pools import BaseEnvPool, EnvFn, EnvPool, PoolConfig, WorkerError, env_fn, unpack
from skillrise_gym.pools import make_pool as _make_pool

__all__ = ["BaseEnvPool", "EnvFn", "EnvPool", "PoolConfig", "WorkerError", "env_fn", "make_pool", "unpack"]


def make_pool(env_fns: Sequence[EnvFn], workers: int | PoolConfig = 0, timeout: float | None = None,
              ray_address: str | None = None, ray_num_cpus: float | None = None,
              ray_memory: float | None = None) -> BaseEnvPool:
    """`skillrise_gym.pools.make_pool` with the `PoolConfig` fields as keywords (or a `PoolConfig` in their
    place): an `EnvPool` of `workers` processes, or with `ray_address` a `RayEnvPool`."""
    if isinstance(workers, PoolConfig):
        return _make_pool(env_fns, workers)
    return _make_pool(env_fns, PoolConfig(workers=workers, timeout=timeout, ray_address=ray_address,
                                          ray_num_cpus=ray_num_cpus, ray_memory=ray_memory))
