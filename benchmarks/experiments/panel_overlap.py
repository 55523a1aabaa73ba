#!/usr/bin/env python
"""How much the dev and test panels of the reported probe results share, computed exactly, written to
benchmarks/results/panel_overlap.json.

Both named panels (`skillrise_gym.panels`) are drawn from the same held-out split by their own generator seeds,
so they hold no common sequence but can hold common families and tasks: a choice tuned on the dev panel has
seen part of what the test panel measures. This counts it for the panels the decisive experiment reports on
(the probe's test split at one and at two rules per family, K=6, its number of sequences), drawing each panel
the way the bench does (`SequenceEnv.sampler().sequence(seed, index)`), and records each panel's hash, which
tests/test_panels.py checks against the hash the experiment's committed records name (so the counts are of
the panel that was played) and checks that the file is what this code computes.

    python benchmarks/experiments/panel_overlap.py            # rewrite the JSON
    python benchmarks/experiments/panel_overlap.py --check    # exit 1 if the JSON differs from the code
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks/results/panel_overlap.json"
SPLIT = "test"


def settings() -> list[dict]:
    """The decisive experiment's evaluation settings, read from its presets (R=1 and R=2)."""
    from benchmarks.experiments import decisive_experiment as decisive

    out = []
    for name, preset in (("R=1", decisive.R1), ("R=2", decisive.R2)):
        for K in preset.eval_K:
            out.append({"setting": name, "backend_options": {"rules": preset.rules, "bins": preset.bins}, "K": K,
                        "sequences": preset.eval_sequences})
    return out


def panels(options: dict, K: int, n: int) -> tuple[Any, dict[str, list]]:
    """The split's sampler (its `all_families`: every task of the split, by family) and each named panel's
    `n` sequences, drawn from it as the bench draws them."""
    from skillrise_gym.env import SequenceEnv
    from skillrise_gym.panels import PANELS

    env = SequenceEnv(backend="rulebook", K=K, split=SPLIT, backend_options=options)
    try:
        sampler = env.sampler()
        return sampler, {name: [sampler.sequence(PANELS[name], i) for i in range(n)] for name in ("dev", "test")}
    finally:
        env.close()


def compute() -> dict:
    from skillrise_gym.panels import PANELS, panel_hash

    rows = []
    for s in settings():
        sampler, drawn = panels(s["backend_options"], s["K"], s["sequences"])
        split_families = len(sampler.all_families)
        families = {name: {q.family for q in seqs} for name, seqs in drawn.items()}
        tasks = {name: {t.id for q in seqs for t in q.tasks} for name, seqs in drawn.items()}
        slots = [t.id for q in drawn["test"] for t in q.tasks]
        rows.append({
            **s,
            "split_families": split_families,
            "split_tasks": sum(len(group) for group in sampler.all_families.values()),
            "hash": {name: panel_hash("rulebook", SPLIT, s["backend_options"],
                                      [(q.id, [t.id for t in q.tasks]) for q in seqs])
                     for name, seqs in drawn.items()},
            "families": {"dev": len(families["dev"]), "test": len(families["test"]),
                         "shared": len(families["dev"] & families["test"]),
                         # two panels drawing their families independently share this many on average
                         "shared_if_independent": round(len(families["dev"]) * len(families["test"])
                                                        / split_families, 1)},
            "tasks": {"dev": len(tasks["dev"]), "test": len(tasks["test"]),
                      "shared": len(tasks["dev"] & tasks["test"])},
            "test_slots": len(slots),
            "test_slots_in_dev": sum(1 for t in slots if t in tasks["dev"]),
            "sequences_shared": len({q.id for q in drawn["dev"]} & {q.id for q in drawn["test"]}),
        })
    return {"what": "what the dev and test panels share (families, distinct tasks, task slots of the test panel "
                    "whose task the dev panel also plays, whole sequences), the probe's held-out split, drawn as "
                    "the bench draws them", "split": SPLIT, "panels": {"dev": PANELS["dev"], "test": PANELS["test"]},
            "settings": rows}


def main(argv: list[str] | None = None) -> int:
    if str(ROOT) not in sys.path:  # run as a script: the repository, where benchmarks/ is a package
        sys.path.insert(0, str(ROOT))
    from benchmarks.experiments import computed_json

    return computed_json.main(argv, __doc__.split("\n\n")[0], compute, OUT, Path(__file__).name,
                              "what the panels hold now")


if __name__ == "__main__":
    sys.exit(main())
