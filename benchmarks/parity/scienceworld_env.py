"""ScienceWorld backend vs the stock `scienceworld.ScienceWorldEnv`: step, reset, JVM start and memory.

    python benchmarks/parity/scienceworld_env.py [--tasks ...] [--out bench_out/scienceworld_env.json]

Steps are gold-path replays (the same actions for every contender) on one dev variation of each task.
Contenders:
  stock/default-jvm     ScienceWorldEnv.step as shipped (JVM default flags, uncapped heap)
  stock/hash2           ScienceWorldEnv.step with -XX:hashCode=2 -Xmx1g (via JAVA_TOOL_OPTIONS)
  ours/fast             ScienceWorldBackend.step (hash2, 1g heap)
  ours/fast+admissible  ours/fast plus admissible_actions() on every step
  ours/fast+help        ours/fast plus action_grammar() on every step (what SequenceEnv does by default)
  ours/fast-defaulthash ours/fast on a JVM without -XX:hashCode=2
After an untimed warm-up pass (JIT), all contenders run at the same time, interleaved task by task, so that load from other processes on the
machine affects them alike. Also: reset (load + first look), JVM start, a fresh JVM per 3-task sequence vs a
reused one, and each JVM's resident memory after the runs. Medians (ms) and ratios are printed and saved
as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import psutil

from skillrise_gym.backends.scienceworld import ScienceWorldBackend

DEFAULT_TASKS = [
    "boil", "use-thermometer", "power-component", "test-conductivity", "find-animal", "grow-plant",
    "chemistry-mix", "lifespan-longest-lived", "identify-life-stages-1", "inclined-plane-determine-angle",
    "measure-melting-point-known-substance", "mendelian-genetics-known-plant",
]


def median_ms(values: list[float]) -> float:
    return round(1000 * statistics.median(values), 3) if values else float("nan")


def rss_mb(pid: int | None) -> float | None:
    try:
        return round(psutil.Process(pid).memory_info().rss / 2**20, 1) if pid else None
    except psutil.Error:
        return None


def gold_plan(tasks: list[str]) -> list[tuple[str, int, list[str]]]:
    with ScienceWorldBackend() as backend:
        plan = []
        for name in tasks:
            variation = backend.split_variations()[name]["dev"][0]
            plan.append((name, variation, backend.gold_actions(name, variation)))
        return plan


class Ours:
    """ScienceWorldBackend, optionally asking for the admissible list or the action help on every step."""

    def __init__(self, *, deterministic=True, admissible=False, help_text=False) -> None:
        self.backend = ScienceWorldBackend(deterministic=deterministic)
        self.admissible, self.help_text = admissible, help_text
        start = time.perf_counter()
        self.backend._engine()
        self.jvm_start = time.perf_counter() - start

    def reset(self, name: str, variation: int) -> None:
        self.backend.reset(self.backend.make_task(name, variation))

    def step(self, action: str) -> bool:
        result = self.backend.step(action)
        if self.admissible:
            self.backend.admissible_actions()
        if self.help_text:
            self.backend.action_grammar()
        return result.done

    def pid(self) -> int | None:
        return self.backend.jvm_pid

    def close(self) -> None:
        self.backend.close()


class Stock:
    """scienceworld.ScienceWorldEnv as shipped; JVM flags only through JAVA_TOOL_OPTIONS."""

    def __init__(self, java_tool_options: str | None) -> None:
        from scienceworld import ScienceWorldEnv

        previous = os.environ.get("JAVA_TOOL_OPTIONS")
        if java_tool_options:
            os.environ["JAVA_TOOL_OPTIONS"] = java_tool_options
        start = time.perf_counter()
        try:
            self.env = ScienceWorldEnv("", envStepLimit=10**6)
        finally:
            if previous is None:
                os.environ.pop("JAVA_TOOL_OPTIONS", None)
            else:
                os.environ["JAVA_TOOL_OPTIONS"] = previous
        self.jvm_start = time.perf_counter() - start

    def reset(self, name: str, variation: int) -> None:
        self.env.load(name, variation, "easy")
        self.env.reset()

    def step(self, action: str) -> bool:
        return self.env.step(action)[2]

    def pid(self) -> int | None:
        return self.env._gateway.java_process.pid

    def close(self) -> None:
        self.env.close()
        self.env.close = lambda: None  # the stock __del__ would close again (broken pipe)


def run_contenders(plan, warmup: int, repeats: int) -> tuple[dict, dict]:
    """All contenders alive at once and interleaved task by task, so machine-load drift hits them alike.

    `warmup` untimed passes over the tasks first (JIT compilation of each task's code paths), then
    `repeats` timed passes. Returns (per-contender figures, per-task step medians)."""
    contenders = {
        "stock/default-jvm": Stock(None),
        "stock/hash2": Stock("-XX:+UnlockExperimentalVMOptions -XX:hashCode=2 -Xmx1g"),
        "ours/fast": Ours(),
        "ours/fast+admissible": Ours(admissible=True),
        "ours/fast+help": Ours(help_text=True),
        "ours/fast-defaulthash": Ours(deterministic=False),
    }
    steps = {name: [] for name in contenders}
    per_task = {name: {task: [] for task, _v, _g in plan} for name in contenders}
    resets = {name: [] for name in contenders}
    first_reset = {}
    try:
        for round_index in range(warmup + repeats):
            timed = round_index >= warmup
            for name, variation, gold in plan:
                for key, contender in contenders.items():
                    start = time.perf_counter()
                    contender.reset(name, variation)
                    elapsed = time.perf_counter() - start
                    if key not in first_reset:
                        first_reset[key] = elapsed  # cold JVM: class loading and JIT warm-up
                    elif timed:
                        resets[key].append(elapsed)
                    for action in gold:
                        start = time.perf_counter()
                        done = contender.step(action)
                        if timed:
                            steps[key].append(time.perf_counter() - start)
                            per_task[key][name].append(steps[key][-1])
                        if done:
                            break
        figures = {
            key: {
                "step_ms": median_ms(steps[key]),
                "steps": len(steps[key]),
                "reset_ms": median_ms(resets[key]),
                "first_reset_cold_ms": round(1000 * first_reset[key], 1),
                "jvm_start_ms": round(1000 * contender.jvm_start, 1),
                "jvm_rss_mb": rss_mb(contender.pid()),
            }
            for key, contender in contenders.items()
        }
        task_medians = {key: {task: median_ms(v) for task, v in rows.items()} for key, rows in per_task.items()}
        return figures, task_medians
    finally:
        for contender in contenders.values():
            contender.close()


def run_lifecycle(plan, sequences: int = 3) -> dict:
    """A fresh JVM per 3-task sequence vs one reused JVM (what reproducibility would cost without hashCode=2)."""
    chunks = [plan[i : i + 3] for i in range(0, min(len(plan), 3 * sequences), 3)]
    starts, fresh, reused = [], [], []
    for chunk in chunks:
        start = time.perf_counter()
        with ScienceWorldBackend() as backend:
            backend._engine()
            starts.append(time.perf_counter() - start)
            for name, variation, _gold in chunk:
                backend.reset(backend.make_task(name, variation))
                backend.step("look around")
        fresh.append(time.perf_counter() - start)
    with ScienceWorldBackend() as backend:
        backend._engine()
        for chunk in chunks:
            start = time.perf_counter()
            for name, variation, _gold in chunk:
                backend.reset(backend.make_task(name, variation))
                backend.step("look around")
            reused.append(time.perf_counter() - start)
    return {"jvm_start_ms": median_ms(starts), "fresh_jvm_per_sequence_ms": median_ms(fresh),
            "reused_jvm_per_sequence_ms": median_ms(reused)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=DEFAULT_TASKS)
    parser.add_argument("--out", default="bench_out/scienceworld_env.json",
                        help="where the JSON goes: medians (ms) and ratios (default: %(default)s; the committed "
                             "figures: benchmarks/results/scienceworld_env.json)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed passes over the tasks first")
    parser.add_argument("--repeats", type=int, default=2, help="timed passes")
    args = parser.parse_args(argv)

    plan = gold_plan(args.tasks)
    results, task_medians = run_contenders(plan, args.warmup, args.repeats)
    for name, row in results.items():
        print(json.dumps({"contender": name, **row}), flush=True)
    lifecycle = run_lifecycle(plan)
    print(json.dumps({"lifecycle": lifecycle}), flush=True)

    stock, fast = results["stock/hash2"]["step_ms"], results["ours/fast"]["step_ms"]
    per_task_ratio = {
        task: round(task_medians["stock/hash2"][task] / task_medians["ours/fast"][task], 2)
        for task in task_medians["ours/fast"]
    }
    print(json.dumps({"per_task_step_ratio stock_hash2/ours_fast": per_task_ratio}))
    ratios = {
        "median over tasks of (stock_hash2_step / ours_fast_step)": round(statistics.median(per_task_ratio.values()), 2),
        "stock_hash2_step / ours_fast_step": round(stock / fast, 2),
        "stock_default_step / ours_fast_step": round(results["stock/default-jvm"]["step_ms"] / fast, 2),
        "stock_hash2_step / ours_fast+admissible_step": round(stock / results["ours/fast+admissible"]["step_ms"], 2),
        "stock_hash2_step / ours_fast+help_step": round(stock / results["ours/fast+help"]["step_ms"], 2),
        "ours_fast_defaulthash_step / ours_fast_step": round(results["ours/fast-defaulthash"]["step_ms"] / fast, 2),
        "stock_hash2_reset / ours_reset": round(results["stock/hash2"]["reset_ms"] / results["ours/fast"]["reset_ms"], 2),
        "fresh_jvm / reused_jvm per sequence": round(
            lifecycle["fresh_jvm_per_sequence_ms"] / lifecycle["reused_jvm_per_sequence_ms"], 2
        ),
    }
    print(json.dumps({"ratios": ratios}, indent=1))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "scienceworld_env", "python": sys.version.split()[0], "cpus": os.cpu_count(),
        "tasks": [f"{n}-{v}" for n, v, _ in plan], "warmup": args.warmup, "repeats": args.repeats,
        "results": results, "per_task_step_ms": task_medians, "per_task_step_ratio": per_task_ratio, "lifecycle": lifecycle, "ratios": ratios,
    }, indent=1))
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
