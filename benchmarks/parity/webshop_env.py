"""WebShop engine latency on generated catalogs of growing size: build, reset, step and search.

    python benchmarks/parity/webshop_env.py                      # 1k, 10k and 100k products
    python benchmarks/parity/webshop_env.py --sizes 1000 10000 --out /tmp/webshop_env.json

For each size: the first build (generate the catalog + index it; both then cached on disk), a cached
build (read JSON + load the index), then medians over expert episodes of `backend.reset`, `backend.step`
(search steps and click steps apart) and raw `search` calls with the goals' queries. Prints a table and
saves every figure, with ratios to the smallest size, as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path


def median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 3) if values else float("nan")


def bench_size(size: int, episodes: int, searches: int, seed: int) -> dict:
    from skillrise_gym.backends.webshop.backend import WebShopBackend
    from skillrise_gym.backends.webshop.engine import Shop

    backend = WebShopBackend(num_products=size, noun_matcher="fallback")
    start = time.perf_counter()
    shop = backend.shop  # generates + indexes on the first run for this size, else loads from the cache
    first_build = time.perf_counter() - start
    start = time.perf_counter()
    Shop.build(backend.config)  # everything on disk now: JSON parse + goals + index load
    cached_build = time.perf_counter() - start

    rng = random.Random(seed)
    tasks = backend.list_tasks("test")
    resets, search_steps, click_steps, successes = [], [], [], 0
    for task in rng.sample(tasks, min(episodes, len(tasks))):
        t0 = time.perf_counter()
        backend.reset(task)
        resets.append(time.perf_counter() - t0)
        for _ in range(backend.default_max_task_steps):
            action = backend.expert_action()
            if action is None:
                break
            t0 = time.perf_counter()
            result = backend.step(action)
            (search_steps if action.startswith("search[") else click_steps).append(time.perf_counter() - t0)
            if result.done:
                successes += result.success
                break

    queries = [shop.goals[rng.randrange(len(shop.goals))]["query"] for _ in range(searches)]
    search_times = []
    for q in queries:
        t0 = time.perf_counter()
        shop.search_engine.search(q)
        search_times.append(time.perf_counter() - t0)

    return {
        "products": size,
        "goals": len(shop.goals),
        "first_build_s": round(first_build, 3),
        "cached_build_s": round(cached_build, 3),
        "reset_ms": median_ms(resets),
        "step_search_ms": median_ms(search_steps),
        "step_click_ms": median_ms(click_steps),
        "search_ms": median_ms(search_times),
        "expert_success": round(successes / max(len(resets), 1), 3),
        "episodes": len(resets),
        "searches": len(search_times),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--episodes", type=int, default=100, help="expert episodes per size")
    parser.add_argument("--searches", type=int, default=300, help="raw search calls per size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench_out/webshop_env.json",
                        help="where the JSON goes: every figure and its ratio to the smallest size (default: "
                             "%(default)s; none is committed, docs/webshop.md has the figures)")
    parser.add_argument("--cache", default=None, help="cache root (default: $SKILLRISE_CACHE or a temp dir)")
    args = parser.parse_args(argv)

    if args.cache:
        os.environ["SKILLRISE_CACHE"] = args.cache
    elif not os.environ.get("SKILLRISE_CACHE"):
        os.environ["SKILLRISE_CACHE"] = tempfile.mkdtemp(prefix="skillrise-webshop-bench-")

    rows = []
    for size in args.sizes:
        row = bench_size(size, args.episodes, args.searches, args.seed)
        rows.append(row)
        print(json.dumps(row), flush=True)
    base = rows[0]
    for row in rows:
        row["ratio_to_smallest"] = {
            key: round(row[key] / base[key], 2) if base[key] else None
            for key in ("first_build_s", "cached_build_s", "reset_ms", "step_search_ms", "step_click_ms", "search_ms")
        }

    header = f"{'products':>9} {'goals':>7} {'build s':>8} {'cached s':>8} {'reset ms':>9} {'search-step ms':>15} " \
             f"{'click-step ms':>14} {'search ms':>10} {'expert':>7}"
    print(header)
    for r in rows:
        print(f"{r['products']:>9} {r['goals']:>7} {r['first_build_s']:>8} {r['cached_build_s']:>8} {r['reset_ms']:>9} "
              f"{r['step_search_ms']:>15} {r['step_click_ms']:>14} {r['search_ms']:>10} {r['expert_success']:>7}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"benchmark": "webshop_env", "python": sys.version.split()[0],
                               "machine": platform.machine(), "cpus": os.cpu_count(), "results": rows}, indent=2))
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
