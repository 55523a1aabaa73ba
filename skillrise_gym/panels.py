"""Evaluation panels: which sequences a result is measured on, named, reserved and fingerprinted.

A *panel* is the list of sequences a bench block plays: a split's sequences of one length K, drawn by a
generator seed (`SequenceSampler.sequence(seed, index)`, index 0..N-1). Two named panels have seeds of their
own, reserved for them and never used to seed anything else:

    dev   every design decision (tuning sweeps, ablations that pick a setting, "which run is best")
    test  reported results only: each reported figure is measured on it once, with settings fixed before

Any other seed is an unnamed panel. Every bench summary block records its panel (`panel_record`: name, seed,
N, hash), and comparisons across runs refuse runs played on panels whose hashes differ (`check_same_panel`).
The hash is of what was played, not of how it was drawn: the env, split and backend options (which decide
what a task id names) and each sequence's id and task ids in draw order (`panel_hash`), so a panel rebuilt
on another machine or by another code path hashes the same when it holds the same tasks.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Mapping

#: the reserved generator seeds of the named panels. dev is 7: the seed the transfer experiment's evaluations
#: used before panels were named (its old `seed + 7` at RL seed 0), so the figures tuned on it are dev figures.
PANELS: dict[str, int] = {"dev": 7, "test": 20261206}

#: what a user is told when the test panel is asked for a choice, not a report
TEST_IS_FOR_REPORTING = ("the test panel is for reporting results, each measured on it once with settings fixed "
                         "before; make design choices (sweeps, ablations that pick a setting, the best run) on "
                         "--panel dev")


class PanelMismatch(ValueError):
    """Two results to be compared were measured on different panels."""


def panel_seed(name: str) -> int:
    """The generator seed reserved for the named panel; an unknown name is a ValueError listing the names."""
    try:
        return PANELS[name]
    except KeyError:
        raise ValueError(f"unknown panel {name!r}; the named panels are {', '.join(PANELS)}") from None


def panel_name(seed: int) -> str | None:
    """The named panel whose reserved seed `seed` is, or None."""
    return next((name for name, reserved in PANELS.items() if reserved == int(seed)), None)


def panel_hash(env: str, split: str, backend_options: Mapping[str, Any],
               sequences: Iterable[tuple[str, Iterable[str]]]) -> str:
    """The fingerprint of a panel: sha256 over the env, split, backend options and each (sequence id, task
    ids) in draw order; 16 hex digits (64 bits: two panels of a study never collide by chance)."""
    payload = {"env": env, "split": split, "backend_options": dict(backend_options),
               "sequences": [[str(sequence_id), [str(t) for t in task_ids]] for sequence_id, task_ids in sequences]}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def records_hash(env: str, split: str, backend_options: Mapping[str, Any],
                 results: Iterable[Mapping[str, Any]]) -> str:
    """`panel_hash` of the sequences a bench block's result records played (by draw index)."""
    ordered = sorted(results, key=lambda r: int(r["index"]))
    return panel_hash(env, split, backend_options, ((r["sequence_id"], r.get("task_ids") or []) for r in ordered))


def panel_record(env: str, split: str, backend_options: Mapping[str, Any], seed: int,
                 results: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What a summary block says of its panel: its name (None: an unnamed seed), seed, size and hash."""
    results = list(results)
    return {"name": panel_name(seed), "seed": int(seed), "sequences": len(results),
            "hash": records_hash(env, split, backend_options, results)}


def check_same_panel(first: tuple[str, str], second: tuple[str, str]) -> None:
    """Refuse a comparison of two results measured on different panels: each argument is (what, hash); a
    `PanelMismatch` names both and their hashes."""
    (a, hash_a), (b, hash_b) = first, second
    if hash_a != hash_b:
        raise PanelMismatch(f"{a} and {b} were measured on different panels (panel hash {hash_a} vs {hash_b}): a "
                            "paired comparison needs the same sequences; evaluate both on one panel (--panel)")
