"""The env engines against their stock paths: benchmarks/results/alfworld_env.json
(`benchmarks/parity/alfworld_env.py`) and scienceworld_env.json (`benchmarks/parity/scienceworld_env.py`).
Every ratio is computed here from the medians the JSON holds."""

from __future__ import annotations

import statistics

from .core import RenderError, Results, markdown_table, ratio, sources, table

#: when each file was measured (`git log --follow` on it; the JSON records no date)
MEASURED = {
    "alfworld_env.json": "2026-12-04",
    "scienceworld_env.json": "2026-12-05",
}


def ms(seconds: float) -> str:
    """Milliseconds: whole above 100, one decimal below."""
    value = seconds * 1000
    return f"{value:.0f} ms" if value >= 100 else f"{value:.1f} ms"


def ms_value(value: float) -> str:
    """A value already in milliseconds."""
    return ms(value / 1000)


# ------------------------------------------------------------------------------------------ ALFWorld
@table("engines/alfworld-speed")
def alfworld_speed(results: Results) -> str:
    src = results.json("alfworld_env.json")
    med = {key: src.number(f"median_seconds.{key}") for key in
           ("stock_load_reset", "ours_cold_reset", "ours_warm_reset", "ours_repeat_reset", "stock_step", "ours_step")}
    stock_reset, stock_step = med["stock_load_reset"], med["stock_step"]
    rows = [
        ["stock load+reset (`register_games` + `make` + `reset`)", ms(stock_reset), ""],
        ["ours, cold cache", ms(med["ours_cold_reset"]), ratio(stock_reset / med["ours_cold_reset"])],
        ["ours, warm cache, new game, fresh backend (a new worker's view)", ms(med["ours_warm_reset"]),
         f"**{ratio(stock_reset / med['ours_warm_reset'])}**"],
        ["ours, reset of the game already loaded", ms(med["ours_repeat_reset"]),
         ratio(stock_reset / med["ours_repeat_reset"])],
        ["stock step", ms(stock_step), ""],
        ["ours step", ms(med["ours_step"]), ratio(stock_step / med["ours_step"])],
    ]
    games, split = int(src.number("games")), src("split")
    note = (f"medians over {int(src.number('samples.stock_load_reset'))} resets and "
            f"{int(src.number('samples.ours_step'))} walkthrough steps of {games} `{split}` games, stock and ours "
            f"interleaved; reset cache on disk {src.number('cache_mb_per_game'):.2f} MB per game; Python "
            f"{src('python')}; measured {MEASURED['alfworld_env.json']} (git log; the JSON records no machine load)")
    return markdown_table(["", "median", "stock / ours"], rows) + "\n" + sources("alfworld_env.json", note=note)


# ------------------------------------------------------------------------------------------ ScienceWorld
#: the benchmark's contenders, as the table names them
CONTENDERS = {
    "stock/default-jvm": "stock `ScienceWorldEnv.step`, default JVM",
    "stock/hash2": "stock, `-XX:hashCode=2 -Xmx1g`",
    "ours/fast": "ours (hashCode=2, 1 GB cap)",
    "ours/fast+admissible": "ours + `admissible_actions()` every step",
    "ours/fast+help": "ours + `action_grammar()` every step (SequenceEnv's default prompt)",
    "ours/fast-defaulthash": "ours on a default-hash JVM (`deterministic=False`)",
}


def _scienceworld_note(src) -> str:
    steps = sorted({int(src.number(f"results.{key}.steps")) for key in CONTENDERS})
    said = " or ".join(str(s) for s in steps)
    return (f"gold-path replays of one dev variation of {len(src('tasks'))} tasks ({said} steps per contender), "
            f"{int(src.number('warmup'))} untimed warm-up pass then {int(src.number('repeats'))} timed passes, all "
            f"six contenders alive at once and interleaved task by task; medians; {int(src.number('cpus'))} CPUs, "
            f"Python {src('python')}; measured {MEASURED['scienceworld_env.json']} (git log), beside two training "
            "jobs")


@table("engines/scienceworld-speed")
def scienceworld_speed(results: Results) -> str:
    src = results.json("scienceworld_env.json")
    rows = []
    for key, label in CONTENDERS.items():
        step = ms_value(src.number(f"results.{key}.step_ms"))
        rss = f"{src.number(f'results.{key}.jvm_rss_mb'):,.0f} MB"
        if key == "ours/fast":
            step, rss = f"**{step}**", rss + " (after this short run)"
        elif key == "stock/default-jvm":
            rss += " (uncapped)"
        rows.append([label, step, ms_value(src.number(f"results.{key}.reset_ms")), rss])
    return (markdown_table(["contender", "step", "reset", "JVM RSS after"], rows) + "\n"
            + sources("scienceworld_env.json", note=_scienceworld_note(src)))


@table("engines/scienceworld-ratios")
def scienceworld_ratios(results: Results) -> str:
    src = results.json("scienceworld_env.json")

    def step(key: str) -> float:
        return src.number(f"results.{key}.step_ms")

    stock, ours = step("stock/hash2"), step("ours/fast")
    per_task_stock, per_task_ours = src("per_task_step_ms.stock/hash2"), src("per_task_step_ms.ours/fast")
    if not isinstance(per_task_ours, dict) or not per_task_ours:
        raise RenderError(f"{src.rel}: field 'per_task_step_ms.ours/fast' is not a table of tasks")
    per_task = [src.number(f"per_task_step_ms.stock/hash2.{task}") / src.number(f"per_task_step_ms.ours/fast.{task}")
                for task in per_task_ours if task in per_task_stock]
    fresh = src.number("lifecycle.fresh_jvm_per_sequence_ms")
    reused = src.number("lifecycle.reused_jvm_per_sequence_ms")
    rows = [
        ["stock / ours, step, same JVM flags (hashCode=2, 1 GB cap)", f"**{ratio(stock / ours)}**"],
        [f"the same, median of the {len(per_task)} per-task ratios [range]",
         f"{ratio(statistics.median(per_task))} [{ratio(min(per_task))}, {ratio(max(per_task))}]"],
        ["stock on its default JVM / ours, step", ratio(step("stock/default-jvm") / ours)],
        ["stock / ours + `admissible_actions()` every step", ratio(stock / step("ours/fast+admissible"))],
        ["stock / ours + `action_grammar()` every step", ratio(stock / step("ours/fast+help"))],
        ["ours, hashCode=2 / ours on a default-hash JVM, step (the flag's cost)",
         ratio(ours / step("ours/fast-defaulthash"))],
        ["stock / ours, reset",
         ratio(src.number("results.stock/hash2.reset_ms") / src.number("results.ours/fast.reset_ms"))],
        ["JVM start", ms_value(src.number("lifecycle.jvm_start_ms"))],
        ["a 3-task sequence: a fresh JVM / one reused JVM",
         f"{ms_value(fresh)} / {ms_value(reused)} ({ratio(fresh / reused)})"],
    ]
    return (markdown_table(["figure", "value"], rows) + "\n"
            + sources("scienceworld_env.json", note="the same run as the table above"))
