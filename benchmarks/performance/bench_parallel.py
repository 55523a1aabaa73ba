"""Sequences per minute of `skillrise-bench` with 1 vs 2 env worker processes on the same work.

Both settings play the same pinned sequences with the expert agent and the same number of sequences in
flight (`--parallel`), so the only difference is how many processes step the engines. Each setting runs
`--repeats` times in fresh run directories, after an uncounted warm-up run that fills the caches (the
first ALFWorld run extracts and translates games); the medians and their ratio are printed and saved as JSON.

    python benchmarks/performance/bench_parallel.py --env alfworld --backend-option data_dir=../shared/data/alfworld
    python benchmarks/performance/bench_parallel.py --env webshop --num-sequences 40

The ratio is bounded by the free cores: on a machine shared with other jobs it stays well under 2. So the
script also measures what the machine offers right now: the throughput of 2 processes running a pure-Python
busy loop relative to 1 (`cpu_parallelism`, 2.0 on two idle cores); read the bench ratio against it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import tempfile
import time
from pathlib import Path
from typing import Sequence

from skillrise_gym.agents.expert import ExpertAgent
from skillrise_gym.bench.cli import parse_backend_options
from skillrise_gym.bench.runner import BenchConfig, run_bench


def one_run(args: argparse.Namespace, workers: int, out: Path) -> dict:
    config = BenchConfig(env=args.env, out=str(out), K=[args.K], num_sequences=args.num_sequences, split=args.split,
                         seed=args.seed, workers=workers, parallel=args.parallel, progress=False, plots=False,
                         backend_options=parse_backend_options(args.backend_option))
    started = time.perf_counter()
    outcome = run_bench(config, ExpertAgent())
    wall = time.perf_counter() - started
    assert outcome.status == "complete", outcome.message
    block = outcome.summary["blocks"][0]
    return {"workers": workers, "wall_s": wall, "sequences": block["sequences"],
            "sequences_per_minute": 60 * block["sequences"] / wall, "success": block["success"]["mean"]}


def _burn(iterations: int) -> float:
    started = time.perf_counter()
    total = 0
    for i in range(iterations):
        total += i
    return time.perf_counter() - started


def cpu_parallelism(ns: Sequence[int] = (2,), iterations: int = 3_000_000, repeats: int = 5) -> dict[int, float]:
    """Throughput of n busy processes relative to one, for each n (2.0 for n = 2 on two free cores); the
    median of `repeats` measurements, alternating with the one-process reference, since other jobs come and
    go. (benchmarks/performance/rollout_throughput.py measures with it too.)"""
    ctx = mp.get_context("spawn")
    result = {}
    with ctx.Pool(max(ns)) as pool:
        pool.map(_burn, [1000] * max(ns))  # start every worker before timing
        for n in ns:
            ratios = []
            for _ in range(repeats):
                one = pool.apply(_burn, (iterations,))
                started = time.perf_counter()
                pool.map(_burn, [iterations] * n, chunksize=1)
                ratios.append(n * one / (time.perf_counter() - started))
            result[n] = statistics.median(ratios)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="alfworld")
    p.add_argument("--split", default=None)
    p.add_argument("--K", type=int, default=2)
    p.add_argument("--num-sequences", type=int, default=8)
    p.add_argument("--parallel", type=int, default=2, help="sequences in flight, equal for both settings")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="uncounted runs first (fills data and engine caches)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", default=None, help="where the JSON goes: the medians, their ratio, the machine's CPU "
                   "parallelism and every run (default: bench_parallel.json in a temporary directory; none is "
                   "committed)")
    args = p.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench-parallel-"))
    runs: dict[int, list[dict]] = {1: [], 2: []}
    for warm in range(args.warmup):
        run = one_run(args, 1, root / f"warmup-{warm}")
        print(f"warm-up: {run['sequences_per_minute']:.1f} sequences/min (not counted)", flush=True)
    for repeat in range(args.repeats):
        for workers in (1, 2):  # interleaved, so load changes on the machine hit both settings alike
            run = one_run(args, workers, root / f"w{workers}-r{repeat}")
            runs[workers].append(run)
            print(f"workers={workers} repeat={repeat}: {run['sequences_per_minute']:.1f} sequences/min "
                  f"({run['wall_s']:.1f} s, success {run['success']:.2f})", flush=True)
    median = {w: statistics.median(r["sequences_per_minute"] for r in rs) for w, rs in runs.items()}
    parallelism = cpu_parallelism([2])[2]
    report = {
        "env": args.env, "K": args.K, "num_sequences": args.num_sequences, "parallel": args.parallel,
        "repeats": args.repeats, "warmup": args.warmup, "agent": "expert",
        "median_sequences_per_minute": {"1_worker": median[1], "2_workers": median[2]},
        "ratio_2_over_1": median[2] / median[1],
        "cpu_parallelism": parallelism,
        "runs": runs[1] + runs[2],
    }
    path = Path(args.json) if args.json else root / "bench_parallel.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"median sequences/min: 1 worker {median[1]:.1f}, 2 workers {median[2]:.1f}; "
          f"ratio {report['ratio_2_over_1']:.2f}; the machine's CPU parallelism now: {parallelism:.2f} ({path})")


if __name__ == "__main__":
    main()
