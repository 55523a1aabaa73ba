"""The ScienceWorld JVM's resident memory over a long run (many resets), with our default heap cap.

    python benchmarks/parity/scienceworld_memory.py [--resets 400] [--steps 10] [--every 25] [--max-heap 1g]
        [--out benchmarks/results/scienceworld_memory.json]

`gym.make("SkillRise-ScienceWorld-v0")` (one JVM, its default settings) plays K=3 sequences drawn from the
train split with a random agent that picks from the admissible actions (the valid-action list: the engine's
most memory-hungry call), `--steps` solve steps per task, until `--resets` tasks have been loaded; the
JVM's resident set size (RSS, what the machine must hold) is sampled every `--every` tasks. A JVM's RSS is its heap (capped by
`max_heap`, grown lazily) plus metaspace, JIT code and thread stacks, so it settles above the heap cap's
share in use; the steady state (median of the last quarter of the samples) is the figure to plan for.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import psutil


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resets", type=int, default=400, help="tasks to load")
    parser.add_argument("--steps", type=int, default=10, help="solve steps per task")
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--agent", choices=("random", "expert"), default="random",
                        help="random admissible actions, or the gold-path expert (its paths are computed in "
                             "short-lived JVMs of their own; the sampled JVM is the one playing)")
    parser.add_argument("--max-heap", default="1g")
    parser.add_argument("--out", default="benchmarks/results/scienceworld_memory.json",
                        help="where the JSON goes: the RSS samples and the steady state (default: %(default)s; "
                             "--agent expert's committed run: benchmarks/results/scienceworld_memory_expert.json)")
    args = parser.parse_args(argv)

    import random

    import gymnasium as gym

    import skillrise_gym  # noqa: F401

    env = gym.make("SkillRise-ScienceWorld-v0", K=3, split="train", max_task_steps=args.steps,
                   admissible_actions=args.agent == "random", expert_in_info=args.agent == "expert",
                   backend_options={"max_heap": args.max_heap})
    backend = env.unwrapped
    rng = random.Random(0)
    samples, loaded, sequence = [], 0, 0
    started = time.perf_counter()
    try:
        while loaded < args.resets:
            obs, info = env.reset(seed=sequence)
            sequence += 1
            position, done = -1, False
            while not done:
                if obs["role"] == 0 and int(obs["position"]) != position:
                    position = int(obs["position"])
                    loaded += 1
                    if loaded == 1 or loaded % args.every == 0:
                        rss = psutil.Process(backend.backend._jvm.pid).memory_info().rss / 2**20
                        samples.append({"resets": loaded, "rss_mb": round(rss, 1),
                                        "seconds": round(time.perf_counter() - started, 1)})
                        print(f"{loaded:5d} tasks: JVM RSS {rss:7.1f} MB", flush=True)
                if args.agent == "expert":
                    command = info.get("expert_action") or "look around"
                else:
                    command = rng.choice(list(obs["admissible_actions"]) or ["look around"])
                action = f"<action>{command}</action>" if obs["role"] == 0 else "<skill>notes</skill>"
                obs, _reward, done, _truncated, info = env.step(action)
    finally:
        env.close()
    by_name = {t.payload["task_name"] for t in backend.backend.list_tasks("train")}
    tail = [s["rss_mb"] for s in samples[-max(1, len(samples) // 4):]]
    report = {
        "max_heap": args.max_heap, "resets": loaded, "steps_per_task": args.steps, "task_kinds": len(by_name),
        "workload": f"gym.make, K=3, {args.agent} agent", "samples": samples,
        "steady_rss_mb": round(statistics.median(tail), 1), "peak_rss_mb": max(s["rss_mb"] for s in samples),
        "first_rss_mb": samples[0]["rss_mb"],
    }
    print(f"steady state (median of the last quarter): {report['steady_rss_mb']} MB; peak {report['peak_rss_mb']} MB; "
          f"after the first reset {report['first_rss_mb']} MB (max_heap {args.max_heap})")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
