"""How often GiGPO's anchor states repeat across G=4 trials of a task (random admissible actions): what the
step-level advantage can use on ALFWorld and WebShop.

    python benchmarks/experiments/gigpo_anchors.py

Prints one JSON line per backend and saves the list to benchmarks/results/gigpo_anchors.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repo root (benchmarks/<kind>/<name>.py)
if str(ROOT) not in sys.path:  # run as a file
    sys.path.insert(0, str(ROOT))


def anchors(backend: str, split: str) -> dict:
    """8 tasks of `split`, each played by G=4 trials of random admissible actions: the sizes of the groups of
    solve steps that share an anchor state."""
    from skillrise_gym.env import SequenceEnv
    from skillrise_train.credit import anchor_key

    env = SequenceEnv(backend=backend, K=1, split=split, admissible_actions=True)
    sizes, steps = [], 0
    for seq in range(8):
        obs, info = env.reset(seed=seq)
        ids = info["task_ids"]
        keys = []
        for g in range(4):
            obs, info = env.reset(options={"task_ids": ids})
            rng = random.Random(1000 * seq + g)
            done = False
            while not done:
                if obs["role"] == 0:
                    keys.append(anchor_key(obs))
                    action = rng.choice(list(obs["admissible_actions"]) or ["look"])
                    obs, r, done, tr, info = env.step(f"<action>{action}</action>")
                else:
                    obs, r, done, tr, info = env.step("<skill>x</skill>")
        counts = Counter(keys)
        sizes += list(counts.values())
        steps += len(keys)
    env.close()
    repeated = sum(c for c in sizes if c > 1)
    return {"backend": backend, "split": split, "tasks": 8, "G": 4, "solve_steps": steps,
            "mean_group_size": round(steps / len(sizes), 2), "repeated_share": round(repeated / steps, 3),
            "largest_group": max(sizes)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Prints one JSON line per backend; saves the list as JSON to --out.")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gigpo_anchors.json"),
                        help="where the JSON goes (default: benchmarks/results/gigpo_anchors.json)")
    args = parser.parse_args(argv)
    results = []
    for backend, split in (("alfworld", "eval_in_distribution"), ("webshop", "test")):
        results.append(anchors(backend, split))
        print(json.dumps(results[-1]), flush=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
