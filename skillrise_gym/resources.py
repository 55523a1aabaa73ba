"""What this machine can hold, for sizing env pools: the bench (`bench/runner.py`) and the trainer
(`skillrise_train/rollout_setup.py`, `pool_size`) bound the envs of a backend whose envs hold memory of their own
(`Backend.env_memory`: a ScienceWorld env's JVM, about 1.2 GB) by the memory available, the same way."""

from __future__ import annotations

import os


def available_memory() -> int | None:
    """Bytes of memory available to new processes (MemAvailable of /proc/meminfo, else the free physical
    pages), or None where the system says neither."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def envs_memory_holds(per_env: int) -> int | None:
    """How many envs of `per_env` bytes each the available memory holds (at least 1), or None when there is no
    bound: envs that hold no memory of their own (`per_env` 0), or a system that does not say what is free."""
    if not per_env:
        return None
    available = available_memory()
    if available is None:
        return None
    return max(1, available // per_env)


__all__ = ["available_memory", "envs_memory_holds"]
