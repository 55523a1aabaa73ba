"""ALFWorld reset and step times: ALFWorld's stock engine path vs this project's backend.

    python benchmarks/parity/alfworld_env.py [--data-dir DIR] [--games 12] [--split eval_in_distribution] [--out FILE]

For each of N games (spread over the task types) it measures, interleaved so that background load hits
both sides alike:
- stock load+reset: `textworld.gym.register_games` + `make` + `reset`, as ALFWorld plays a game;
- ours cold: `ALFWorldBackend.reset` of the game with an empty reset cache;
- ours warm: a fresh backend (new engine, empty memory) on the now-populated disk cache, a different game
  each reset: what a new worker process sees;
- ours repeat: resetting the game that is already loaded (the K=repeat / Pass@k case);
- steps: the game's walkthrough, stock vs ours.
Medians and ratios (stock / ours) are printed and saved as JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path


def pick_games(tasks, n: int):
    by_family = defaultdict(list)
    for task in tasks:
        by_family[task.family].append(task)
    chosen, i = [], 0
    while len(chosen) < n and any(i < len(v) for v in by_family.values()):
        for family in sorted(by_family):
            if i < len(by_family[family]) and len(chosen) < n:
                chosen.append(by_family[family][i * 7 % len(by_family[family])])
        i += 1
    return chosen


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None, help="ALFWorld data (default: $ALFWORLD_DATA or ~/.cache/alfworld)")
    parser.add_argument("--split", default="eval_in_distribution")
    parser.add_argument("--games", type=int, default=12)
    parser.add_argument("--out", default="bench_out/alfworld_env.json",
                        help="where the JSON goes: medians and ratios (default: %(default)s; the committed "
                             "figures: benchmarks/results/alfworld_env.json)")
    args = parser.parse_args(argv)

    from skillrise_gym.backends.alfworld import ALFWorldBackend
    from skillrise_gym.backends.alfworld.fastreset import TranslationCache
    from skillrise_gym.backends.alfworld.stock import make_stock_env

    lister = ALFWorldBackend(data_dir=args.data_dir)
    games = pick_games(lister.list_tasks(args.split), args.games)
    cache_folder = Path(tempfile.mkdtemp(prefix="alfworld-bench-cache-"))

    def backend_on(cache: TranslationCache) -> ALFWorldBackend:
        backend = ALFWorldBackend(data_dir=args.data_dir)
        backend._translation_cache = cache
        return backend

    times: dict[str, list[float]] = defaultdict(list)
    # warm-up: imports and first-use costs on both sides, on a game not measured
    warm_up = lister.list_tasks(args.split)[-1]
    timed(lambda: make_stock_env(warm_up.payload["gamefile"]).reset())
    warm_up_cache = Path(tempfile.mkdtemp(prefix="alfworld-bench-warmup-"))
    backend_on(TranslationCache(warm_up_cache)).reset(warm_up)

    cold = backend_on(TranslationCache(cache_folder))
    for task in games:
        gamefile = task.payload["gamefile"]
        stock_env = make_stock_env(gamefile)
        t, _ = timed(stock_env.reset)
        times["stock_load_reset"].append(t)
        for action in task_walkthrough(gamefile):
            t, _ = timed(lambda: stock_env.step([action]))
            times["stock_step"].append(t)
        stock_env.close()
        t, _ = timed(lambda: cold.reset(task))
        times["ours_cold_reset"].append(t)
        t, _ = timed(lambda: cold.reset(task))
        times["ours_repeat_reset"].append(t)
        for action in cold.walkthrough():
            t, _ = timed(lambda: cold.step(action))
            times["ours_step"].append(t)
    warm = backend_on(TranslationCache(cache_folder))
    for task in games:
        t, _ = timed(lambda: warm.reset(task))
        times["ours_warm_reset"].append(t)
    cache_mb = TranslationCache(cache_folder).size_bytes() / 2**20
    shutil.rmtree(cache_folder, ignore_errors=True)
    shutil.rmtree(warm_up_cache, ignore_errors=True)

    medians = {k: statistics.median(v) for k, v in times.items()}
    ratios = {
        "stock_over_warm_reset": medians["stock_load_reset"] / medians["ours_warm_reset"],
        "stock_over_cold_reset": medians["stock_load_reset"] / medians["ours_cold_reset"],
        "stock_over_repeat_reset": medians["stock_load_reset"] / medians["ours_repeat_reset"],
        "stock_over_ours_step": medians["stock_step"] / medians["ours_step"],
    }
    result = {
        "games": len(games), "split": args.split, "samples": {k: len(v) for k, v in times.items()},
        "median_seconds": medians, "ratios": ratios, "cache_mb_per_game": cache_mb / max(1, len(games)),
        "python": sys.version.split()[0],
    }
    for key, value in medians.items():
        print(f"{key:22s} median {value * 1000:8.1f} ms  (n={len(times[key])})")
    for key, value in ratios.items():
        print(f"{key:26s} {value:6.1f}x")
    print(f"reset cache on disk: {result['cache_mb_per_game']:.3f} MB per game")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"saved {out}")
    return 0


def task_walkthrough(gamefile: str) -> list[str]:
    with open(gamefile, encoding="utf-8") as f:
        return list(json.load(f)["walkthrough"])


if __name__ == "__main__":
    sys.exit(main())
