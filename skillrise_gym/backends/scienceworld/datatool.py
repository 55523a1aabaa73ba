"""ScienceWorld: check Java and the engine, count tasks per split, show or fill the gold-path cache.

    skillrise-data scienceworld                          # report (starts one JVM the first time)
    skillrise-data scienceworld --precompute-difficulty --split test [--tasks boil,melt] [--limit 20]

ScienceWorld's data ships inside the `scienceworld` package (a jar); nothing is downloaded. Gold paths
(expert actions, whose length is the task difficulty) are cached under $SKILLRISE_CACHE/scienceworld/gold.
"""

from __future__ import annotations

import argparse
import importlib.util
import time

from skillrise_gym.backends.base import SkillRiseError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--simplifications", default="easy", help="engine simplifications (default: easy)")
    parser.add_argument(
        "--precompute-difficulty", action="store_true", help="compute and cache missing gold paths (slow: a JVM start and the planner each)"
    )
    parser.add_argument("--split", choices=("train", "dev", "test"), action="append",
                        help="split(s) to precompute (repeatable; default: all)")
    parser.add_argument("--tasks", default=None, help="comma-separated task names to precompute (default: all 30)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many variations per task and split")
    parser.add_argument("--max-heap", default="1g", help="JVM heap cap (default: 1g)")


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("scienceworld") is None:
        print("scienceworld: not installed. Install it with: pip install 'skillrise-gym[scienceworld]'")
        return 1
    from skillrise_gym.backends.scienceworld import ScienceWorldBackend, catalog
    from skillrise_gym.backends.scienceworld.jvm import find_java, java_major_version

    try:
        java = find_java()
    except SkillRiseError as exc:
        print(f"java: MISSING. {exc}")
        return 1
    print(f"java: {java} (major version {java_major_version(java) or 'unknown'})")
    print(f"scienceworld: {catalog.engine_version()}")

    tasks = [t.strip() for t in args.tasks.split(",")] if args.tasks else None
    try:
        backend = ScienceWorldBackend(simplifications=args.simplifications, tasks=tasks, max_heap=args.max_heap)
    except (SkillRiseError, ValueError) as exc:
        print(f"error: {exc}")
        return 1
    with backend:
        table = backend.split_variations()
        cached = catalog.cached_gold_lengths(backend.simplifications, backend.deterministic)
        print(f"gold-path cache: {catalog.gold_dir(backend.simplifications, backend.deterministic)}")
        print(f"{'task':50s} {'train':>6s} {'dev':>6s} {'test':>6s}  gold cached (train/dev/test)")
        totals = {s: 0 for s in catalog.SPLITS}
        for name in backend.task_names:
            counts = {s: len(table[name][s]) for s in catalog.SPLITS}
            have = {s: sum((name, v) in cached for v in table[name][s]) for s in catalog.SPLITS}
            for s in catalog.SPLITS:
                totals[s] += counts[s]
            print(f"{name:50s} {counts['train']:6d} {counts['dev']:6d} {counts['test']:6d}  "
                  f"{have['train']}/{have['dev']}/{have['test']}")
        print(f"{'total':50s} {totals['train']:6d} {totals['dev']:6d} {totals['test']:6d}  "
              f"{len(cached)} gold paths cached")

        if args.precompute_difficulty:
            splits = args.split or list(catalog.SPLITS)
            started, done = time.monotonic(), 0
            for name in backend.task_names:
                for split in splits:
                    variations = table[name][split][: args.limit] if args.limit else table[name][split]
                    for variation in variations:
                        if (name, variation) in cached:
                            continue
                        backend.gold_actions(name, variation)
                        done += 1
                print(f"  {name}: done ({done} computed so far, {time.monotonic() - started:.0f} s)", flush=True)
            print(f"computed {done} gold paths in {time.monotonic() - started:.0f} s")
    return 0
