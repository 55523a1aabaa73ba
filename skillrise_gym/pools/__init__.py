"""Env pools: many SequenceEnvs stepped together, in this process, in worker processes, or in Ray actors.

    from skillrise_gym.pools import PoolConfig, env_fn, make_pool

    pool = make_pool([env_fn("SkillRise-WebShop-v0", K=3)] * 8, PoolConfig(workers=2, timeout=600.0))
    obs, info = pool.reset(0, seed=1)
    results = pool.step_many({0: "search[red shoes]", 3: "click[buy now]"})  # {i: (obs, r, term, trunc, info)}
    pool.close()

Modules: `base` (`BaseEnvPool`, the interface every pool has, and `WorkerError`), `process` (`EnvPool`:
worker processes, or this process with ``workers=0``; `env_fn`), `ray` (`RayEnvPool`: one Ray actor per env,
and connecting to Ray). `make_pool` picks the pool a `PoolConfig` describes: the bench and the trainer build
their pools here, so both take the same choice the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from skillrise_gym.pools.base import BaseEnvPool, EnvFn, WorkerError, unpack
from skillrise_gym.pools.process import EnvPool, env_fn
from skillrise_gym.pools.ray import RayEnvPool, check_settings

__all__ = ["BaseEnvPool", "EnvFn", "EnvPool", "PoolConfig", "RayEnvPool", "WorkerError", "env_fn", "make_pool",
           "unpack"]


@dataclass(frozen=True)
class PoolConfig:
    """Where a pool's envs run, checked when made (the errors name the CLI flags, as
    `ray.check_settings` says them):

    - `workers`: worker processes (0: every env in this process); with `ray_address` it does not apply;
    - `timeout`: seconds a worker (an actor) may take to answer before it is replaced and its envs' episodes
      are lost (None: no limit for worker processes, `ray.DEFAULT_TIMEOUT` on Ray; unused in this process);
    - `ray_address`: run each env in a Ray actor: "local" (a Ray instance on this machine) or a running
      cluster's address (host:port, ray://host:10001, auto); None: no Ray;
    - `ray_num_cpus`, `ray_memory`: on Ray, the CPUs and the memory (bytes) reserved per env (None: Ray's
      actor defaults); they need `ray_address`.
    """

    workers: int = 0
    timeout: float | None = None
    ray_address: str | None = None
    ray_num_cpus: float | None = None
    ray_memory: float | None = None

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """ValueError unless these are settings a pool can take (Ray itself is not needed for it)."""
        check_settings(self.ray_address, self.ray_num_cpus, self.ray_memory)


def make_pool(env_fns: Sequence[EnvFn], config: PoolConfig | None = None) -> BaseEnvPool:
    """An `EnvPool` of `config.workers` processes, or with `config.ray_address` a `RayEnvPool` (one actor per
    env, `ray_num_cpus` and `ray_memory` bytes per env; `workers` does not apply); both with
    `config.timeout`. No config: every env in this process."""
    if config is None:
        config = PoolConfig()
    if config.ray_address is None:
        return EnvPool(env_fns, workers=config.workers, timeout=config.timeout)
    return RayEnvPool(env_fns, address=config.ray_address, timeout=config.timeout, num_cpus=config.ray_num_cpus,
                      memory=config.ray_memory)
