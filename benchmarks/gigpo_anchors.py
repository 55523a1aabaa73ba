"""How often GiGPO's anchor states repeat across G=4 trials of a task (random admissible actions): what the
step-level advantage can use on ALFWorld and WebShop.

    python benchmarks/gigpo_anchors.py        # prints one JSON line per backend, saves results/gigpo_anchors.json
"""
import json
import random
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from skillrise_gym.env import SequenceEnv
from skillrise_train.credit import anchor_key

results = []
for backend, split in (("alfworld", "eval_in_distribution"), ("webshop", "test")):
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
    results.append({"backend": backend, "split": split, "tasks": 8, "G": 4, "solve_steps": steps,
                    "mean_group_size": round(steps / len(sizes), 2), "repeated_share": round(repeated / steps, 3),
                    "largest_group": max(sizes)})
    print(json.dumps(results[-1]), flush=True)
(ROOT / "benchmarks" / "results" / "gigpo_anchors.json").write_text(json.dumps(results, indent=2) + "\n")
