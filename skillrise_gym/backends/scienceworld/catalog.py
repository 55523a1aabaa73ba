"""What ScienceWorld offers, without playing it: task names and topics, split variation lists, gold paths.

* Task names and topics come from the package's `tasks.json` (no JVM needed).
* Split variation lists come from the engine (`getVariationsTrain/Dev/Test`) and are cached on disk per
  engine version, so listing tasks does not need a JVM after the first time.
* Gold paths (the expert's actions; their length is the difficulty) are cached on disk, one small JSON file
  per (engine version, JVM determinism flags, simplifications, task, variation). Computing one is slow (a
  JVM started for it and the engine's planner), so it happens on demand (expert use, `difficulty="gold"`, or
  `skillrise-data scienceworld --precompute-difficulty`), never implicitly for a whole split.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from skillrise_gym.paths import atomic_write, cache_dir

SPLITS = ("train", "dev", "test")

#: Fallback difficulty when a variation's gold path is not cached (see `fallback_difficulty`): the gold path
#: length of the task's first test variation (measured with "easy" simplifications, -XX:hashCode=2,
#: scienceworld 1.2.3).
TYPICAL_GOLD_LENGTH: dict[str, int] = {
    "boil": 90,
    "melt": 68,
    "freeze": 85,
    "change-the-state-of-matter-of": 68,
    "use-thermometer": 14,
    "measure-melting-point-known-substance": 31,
    "measure-melting-point-unknown-substance": 96,
    "power-component": 9,
    "power-component-renewable-vs-nonrenewable-energy": 11,
    "test-conductivity": 15,
    "test-conductivity-of-unknown-substances": 19,
    "find-living-thing": 16,
    "find-non-living-thing": 7,
    "find-plant": 12,
    "find-animal": 16,
    "grow-plant": 69,
    "grow-fruit": 69,
    "chemistry-mix": 19,
    "chemistry-mix-paint-secondary-color": 7,
    "chemistry-mix-paint-tertiary-color": 14,
    "lifespan-longest-lived": 4,
    "lifespan-shortest-lived": 4,
    "lifespan-longest-lived-then-shortest-lived": 5,
    "identify-life-stages-1": 42,
    "identify-life-stages-2": 12,
    "inclined-plane-determine-angle": 76,
    "inclined-plane-friction-named-surfaces": 111,
    "inclined-plane-friction-unnamed-surfaces": 192,
    "mendelian-genetics-known-plant": 131,
    "mendelian-genetics-unknown-plant": 132,
}


def fallback_difficulty(task_name: str, variation: int) -> float:
    """The task's typical gold length plus variation/10000 (< 0.14): inside a task family, tasks then sort
    by variation index, which is how the reference implementation orders its sequences."""
    return TYPICAL_GOLD_LENGTH[task_name] + variation / 10000.0


def engine_version() -> str:
    from scienceworld.version import __version__

    return str(__version__)


@lru_cache(maxsize=1)
def task_table() -> tuple[dict[str, Any], ...]:
    """The package's tasks.json: task_id ("1-1"), topic ("Matter"), task (long name), task_name ("boil")."""
    from scienceworld.constants import TASK_PATH

    with open(TASK_PATH, encoding="utf-8") as handle:
        return tuple(json.load(handle))


def task_names() -> list[str]:
    """The 30 task names, in the package's order (topic by topic)."""
    return [row["task_name"] for row in task_table()]


def task_topics() -> dict[str, str]:
    return {row["task_name"]: row["topic"] for row in task_table()}


def check_task_name(name: str) -> str:
    if name not in task_topics():
        raise ValueError(f"unknown ScienceWorld task {name!r}; known tasks: {', '.join(task_names())}")
    return name



# ---------------------------------------------------------------------------------------------- splits
def splits_cache_path() -> Path:
    return cache_dir("scienceworld") / f"splits-scienceworld-{engine_version()}.json"


def load_cached_splits() -> dict[str, dict[str, list[int]]] | None:
    path = splits_cache_path()
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if set(data) != set(task_names()):
        return None
    return data


def save_splits(data: dict[str, dict[str, list[int]]]) -> None:
    atomic_write(splits_cache_path(), json.dumps(data, sort_keys=True))


# ---------------------------------------------------------------------------------------------- gold paths
#: 2: computed in a JVM of their own (version 1 paths came from whatever JVM asked, so they depended on its
#: history; they are not reused)
GOLD_FORMAT = 2


def gold_cache_key(simplifications: str, deterministic: bool) -> str:
    """Gold paths hold only for the engine version, simplifications and JVM hash-code mode they came from."""
    simpl = ",".join(sorted(s for s in simplifications.split(",") if s)) or "none"
    mode = "hash2" if deterministic else "defaulthash"
    return f"scienceworld-{engine_version()}_{simpl}_{mode}_g{GOLD_FORMAT}"


def gold_dir(simplifications: str, deterministic: bool) -> Path:
    return cache_dir("scienceworld", "gold", gold_cache_key(simplifications, deterministic))


def _gold_path(simplifications: str, deterministic: bool, task_name: str, variation: int) -> Path:
    return gold_dir(simplifications, deterministic) / f"{task_name}-{variation}.json"


def read_gold(simplifications: str, deterministic: bool, task_name: str, variation: int) -> list[str] | None:
    try:
        with open(_gold_path(simplifications, deterministic, task_name, variation), encoding="utf-8") as handle:
            return list(json.load(handle)["actions"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_gold(simplifications: str, deterministic: bool, task_name: str, variation: int, actions: list[str]) -> None:
    path = _gold_path(simplifications, deterministic, task_name, variation)
    atomic_write(path, json.dumps({"task_name": task_name, "variation": variation, "actions": list(actions)}, sort_keys=True))


def cached_gold_lengths(simplifications: str, deterministic: bool) -> dict[tuple[str, int], int]:
    """(task name, variation) -> gold path length for every cached gold path of this configuration."""
    lengths: dict[tuple[str, int], int] = {}
    folder = gold_dir(simplifications, deterministic)
    for entry in os.scandir(folder):
        if not entry.name.endswith(".json"):
            continue
        stem = entry.name[: -len(".json")]
        task_name, _, variation = stem.rpartition("-")
        if not variation.isdigit():
            continue
        actions = read_gold(simplifications, deterministic, task_name, int(variation))
        if actions is not None:
            lengths[(task_name, int(variation))] = len(actions)
    return lengths
