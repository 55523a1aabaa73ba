"""Performance: the summary of docs/results/performance.md (engines, trainer update, the main job's step, CPU
generation), rollout throughput (`rollout_throughput.json`), the GPU check (`gpu_check_before.json`,
`gpu_check.json`) and the main job's step by setting (`main_job*.json`). Every ratio is computed here from
the times or rates the JSON holds."""

from __future__ import annotations

from .core import RenderError, Results, Source, markdown_table, ratio, sources, table
from .engines import MEASURED as ENGINES_MEASURED
from .engines import ms

#: when each file was measured (`git log --follow` on it) where the JSON records no date
MEASURED = {
    **ENGINES_MEASURED,
    "scienceworld_memory.json": "2026-12-03",
    "scienceworld_memory_expert.json": "2026-12-03",
    "trainer_throughput.json": "2026-12-05",
    "trainer_throughput_main_job.json": "2026-12-05",
    "main_job.json": "2026-12-04",
    "main_job_2threads.json": "2026-12-04",
    "main_job_prefix_cache.json": "2026-12-05",
    "cpu_generation.json": "2026-12-04",
    "rollout_throughput.json": "2026-12-04",
}


def load(values) -> str:
    """A load average list as its 1-minute figure."""
    return f"{float(values[0]):.1f}"


def _row(src: Source, path: str, where: dict) -> tuple[str, dict]:
    """The entry of the list at `path` whose fields equal `where` (its dotted path, the entry)."""
    entries = src(path)
    if not isinstance(entries, list):
        raise RenderError(f"{src.rel}: field {path!r} is not a list")
    for index, entry in enumerate(entries):
        if isinstance(entry, dict) and all(entry.get(k) == v for k, v in where.items()):
            return f"{path}.{index}", entry
    wanted = ", ".join(f"{k}={v!r}" for k, v in where.items())
    raise RenderError(f"{src.rel}: no entry of {path!r} with {wanted} (a results table reads it)")


# ------------------------------------------------------------------------------------------ summary
def _engine_rows(results: Results) -> list[list[str]]:
    alf = results.json("alfworld_env.json")
    stock_reset, stock_step = alf.number("median_seconds.stock_load_reset"), alf.number("median_seconds.stock_step")
    warm, cold = alf.number("median_seconds.ours_warm_reset"), alf.number("median_seconds.ours_cold_reset")
    step = alf.number("median_seconds.ours_step")
    rows = [
        [f"ALFWorld reset, warm cache, new game (`alfworld_env.py`, {int(alf.number('games'))} games, interleaved "
         f"medians; {MEASURED['alfworld_env.json']})", ms(warm), f"stock {ms(stock_reset)}", ratio(stock_reset / warm)],
        ["ALFWorld reset, cold cache (the game's first load)", ms(cold), f"stock {ms(stock_reset)}",
         ratio(stock_reset / cold)],
        [f"ALFWorld step (walkthroughs, {int(alf.number('samples.ours_step'))} steps)", ms(step),
         f"stock {ms(stock_step)}", ratio(stock_step / step)],
    ]
    sci = results.json("scienceworld_env.json")
    stock = sci.number("results.stock/hash2.step_ms")
    fast, helped = sci.number("results.ours/fast.step_ms"), sci.number("results.ours/fast+help.step_ms")
    steps = int(sci.number("results.ours/fast.steps"))
    rows += [
        [f"ScienceWorld step without the valid list (`scienceworld_env.py`, {len(sci('tasks'))} tasks, {steps} gold "
         f"steps; {MEASURED['scienceworld_env.json']}, beside two training jobs)", ms(fast / 1000),
         f"stock {ms(stock / 1000)} (same JVM flags)", ratio(stock / fast)],
        ["ScienceWorld step with the help text the env adds by default", ms(helped / 1000),
         f"stock {ms(stock / 1000)}", ratio(stock / helped)],
    ]
    mem, expert = results.json("scienceworld_memory.json"), results.json("scienceworld_memory_expert.json")
    rows.append([
        f"ScienceWorld JVM resident memory, steady, over {int(mem.number('resets')):,} tasks x "
        f"{int(mem.number('steps_per_task'))} random admissible steps (`scienceworld_memory.py`)",
        f"{mem.number('steady_rss_mb'):,.0f} MB ({mem('max_heap')} heap cap; {expert.number('steady_rss_mb'):,.0f} MB "
        f"after {int(expert.number('resets'))} expert tasks)",
        f"stock, default JVM, uncapped: {sci.number('results.stock/default-jvm.jvm_rss_mb'):,.0f} MB after the "
        f"{len(sci('tasks'))}-task speed run (`scienceworld_env.py`)", ""])
    return rows


def _trainer_rows(results: Results) -> list[list[str]]:
    tt = results.json("trainer_throughput.json")

    def cell(precision: str, variant: str) -> str:
        base = f"precisions.{precision}.{variant}"
        return (f"{tt.number(base + '.tokens_per_s'):.0f} tokens/s, "
                f"{tt.number(base + '.peak_memory_mb'):,.0f} MB peak RSS")

    def speedup(precision: str) -> float:
        return (tt.number(f"precisions.{precision}.ours.tokens_per_s")
                / tt.number(f"precisions.{precision}.stock.tokens_per_s"))

    rows = [[
        f"Trainer update vs stock `GRPOTrainer`, same rows: SmolLM2 + LoRA, {int(tt.number('rows'))} rows of "
        f"~{int(tt.number('prompt_tokens'))} prompt + {int(tt.number('completion_tokens'))} completion tokens "
        f"(`trainer_throughput.py --rounds {int(tt.number('rounds'))} --precisions float32 bfloat16`, interleaved, "
        f"{int(tt.number('threads'))} thread, load {load(tt('load_average'))}, {MEASURED['trainer_throughput.json']})",
        f"float32 {cell('float32', 'ours')}; with `--bf16` {cell('bfloat16', 'ours')}",
        f"stock {cell('float32', 'stock')}; with `--bf16` {cell('bfloat16', 'stock')}",
        f"{ratio(speedup('float32'))} (bf16 {ratio(speedup('bfloat16'))})"]]

    mj = results.json("trainer_throughput_main_job.json")
    base = "precisions.float32"
    stock, ours, shared = (mj(f"{base}.{v}") for v in ("stock", "ours", "shared"))
    for name, entry in (("stock", stock), ("ours", ours), ("shared", shared)):
        if len(entry.get("round_medians", [])) != int(mj.number("rounds")):
            raise RenderError(f"{mj.rel}: field '{base}.{name}.round_medians' does not hold one median per round")
    s_med, o_med, sh_med = (mj.number(f"{base}.{v}.median_seconds") for v in ("stock", "ours", "shared"))

    def rounds(entry: dict) -> str:
        return " / ".join(f"{float(x):.0f}" for x in entry["round_medians"])

    by_round = " / ".join(ratio(float(a) / float(b)) for a, b in zip(stock["round_medians"], shared["round_medians"]))
    rows.append([
        f"The update on the main job's recorded rows ({int(mj.number('rows'))} turns, "
        f"{int(mj.number(base + '.shared.tokens_per_update')):,} tokens, "
        f"{mj.number(base + '.shared.update_tokens_run'):.2f} of them run once prefixes are shared), SmolLM2 + LoRA, "
        f"float32, shared prefixes and blocked masked attention on (`trainer_throughput.py --rows-from "
        f"{mj('rows_from')} --rows {int(mj.number('rows'))} --repeats {int(mj.number('repeats'))} --rounds "
        f"{int(mj.number('rounds'))}`, {int(mj.number('threads'))} thread, interleaved, load "
        f"{load(mj('load_average'))}, {MEASURED['trainer_throughput_main_job.json']})",
        f"{sh_med:.0f} s median (rounds {rounds(shared)} s), {mj.number(base + '.shared.tokens_per_s'):.0f} tokens/s; "
        f"without sharing {o_med:.0f} s ({rounds(ours)} s); loss difference "
        f"{mj.number(base + '.shared_loss_abs_difference'):.1e}",
        f"stock {s_med:.0f} s (rounds {rounds(stock)} s), {mj.number(base + '.stock.tokens_per_s'):.0f} tokens/s",
        f"**{ratio(s_med / sh_med)}** (rounds {by_round}); {ratio(s_med / o_med)} without sharing; peak RSS "
        f"{ratio(mj.number(base + '.shared.peak_memory_mb') / mj.number(base + '.stock.peak_memory_mb'))}"])
    return rows


def _setting(src: Source, generation: str, update: str, **more) -> tuple[str, dict]:
    return _row(src, "rows", {"generation_dtype": generation, "update_dtype": update, **more})


def _main_job_rows(results: Results) -> list[list[str]]:
    rows = []
    one = results.json("main_job.json")
    _, old = _setting(one, "float32", "float32")
    for rel, label in (("main_job.json", "The main job's step, {threads} thread (`main_job.py`, load {load}, {date}): "
                                          "`--generation-dtype bfloat16 --bf16`"),
                       ("main_job_2threads.json", "the same, {threads} threads (`main_job.py --threads {threads}`, "
                                                  "load {load}, {date})")):
        src = results.json(rel)
        f_path, f32 = _setting(src, "float32", "float32")
        b_path, bf = _setting(src, "bfloat16", "bfloat16")
        parts = [src.number(f"{p}.{k}") for p in (b_path, f_path)
                 for k in ("step_seconds", "generation_seconds", "update_seconds")]
        bs, bg, bu, fs, fg, fu = parts
        cells = [label.format(threads=int(bf["threads"]), load=load(src("load_average_start")), date=MEASURED[rel]),
                 f"{bs:.0f} s (generation {bg:.0f} s, update {bu:.0f} s)",
                 f"float32, {int(f32['threads'])} thread{'s' if int(f32['threads']) > 1 else ''} {fs:.0f} s "
                 f"({fg:.0f} s, {fu:.0f} s)",
                 f"{ratio(fs / bs)} ({ratio(fg / bg)}, {ratio(fu / bu)})"]
        if rel != "main_job.json":
            old_step = float(old["step_seconds"])
            cells[3] += f"; {ratio(old_step / bs)} the old defaults' {old_step:.0f} s (separate runs)"
        rows.append(cells)

    pc = results.json("main_job_prefix_cache.json")
    off_path, off = _row(pc, "rows", {"prefix_cache": "off"})
    on_path, on = _row(pc, "rows", {"prefix_cache": "on"})
    if len(off.get("all", [])) != len(on.get("all", [])):
        raise RenderError(f"{pc.rel}: fields '{off_path}.all' and '{on_path}.all' hold different numbers of rounds")
    by_round = " / ".join(ratio(float(a["generation_seconds"]) / float(b["generation_seconds"]))
                          for a, b in zip(off["all"], on["all"]))
    g_off, g_on = pc.number(f"{off_path}.generation_seconds"), pc.number(f"{on_path}.generation_seconds")
    rows.append([
        f"The main job's generation with the prompt prefix cache (`--prefix-cache-mb`, on by default; `main_job.py "
        f"--rounds {int(pc.number('rounds'))} --settings bfloat16/bfloat16/1/off bfloat16/bfloat16/1/on`, load "
        f"{load(pc('load_average_start'))}, {MEASURED['main_job_prefix_cache.json']})",
        f"{g_on:.0f} s ({pc.number(on_path + '.prompt_reused'):.0%} of prompt tokens reused)",
        f"cache off {g_off:.0f} s", f"{ratio(g_off / g_on)} (rounds {by_round})"])
    return rows


def _cpu_generation_rows(results: Results) -> list[list[str]]:
    src = results.json("cpu_generation.json")
    batches = sorted({int(r["batch"]) for r in src("rows")}, reverse=True)
    rows = []
    for i, batch in enumerate(batches):
        base_path, base = _row(src, "rows", {"batch": batch, "dtype": "float32", "threads": 1})
        times = [src.number(_row(src, "rows", {"batch": batch, "dtype": d, "threads": t})[0] + ".seconds")
                 for d, t in (("float32", 2), ("bfloat16", 1), ("bfloat16", 2))]
        base_s = src.number(base_path + ".seconds")
        if i == 0:
            per_prompt = src.number(base_path + ".prompt_tokens") / batch
            label = (f"SmolLM2 generation on CPU, {batch} prompts of ~{per_prompt:.0f} tokens, "
                     f"{int(src.number('new_tokens'))} new tokens (`cpu_generation.py`, medians of "
                     f"{int(src.number('rounds'))} interleaved rounds, load "
                     f"{load(src('machine.load_average_at_end'))} at the end, {MEASURED['cpu_generation.json']}): "
                     "2 threads / bf16 / both")
            reference = f"float32, 1 thread (the trainer's old default) {base_s:.1f} s"
        else:
            label, reference = f"the same with {batch} prompts", f"{base_s:.1f} s"
        rows.append([label, " / ".join(f"{t:.1f}" for t in times) + " s", reference,
                     " / ".join(ratio(base_s / t) for t in times)])
    return rows


@table("performance/summary")
def summary(results: Results) -> str:
    rows = _engine_rows(results) + _trainer_rows(results) + _main_job_rows(results) + _cpu_generation_rows(results)
    files = ["alfworld_env.json", "scienceworld_env.json", "scienceworld_memory.json",
             "scienceworld_memory_expert.json", "trainer_throughput.json", "trainer_throughput_main_job.json",
             "main_job.json", "main_job_2threads.json", "main_job_prefix_cache.json", "cpu_generation.json"]
    return (markdown_table(["what", "ours", "reference point", "ratio"], rows) + "\n"
            + sources(*files, note="dates from `git log` on each file; loads are the 1-minute load averages the "
                                   "files record (at the start where they record both ends); 2-core CPU machines"))


# ------------------------------------------------------------------------------------------ rollout throughput
ROLLOUT_POOLS = [("w0", "lockstep", "in-process"), ("w2", "lockstep", "2 workers"),
                 ("w2", "overlap", "2 workers, overlapped"), ("ray", "lockstep", "Ray actors"),
                 ("ray", "overlap", "Ray, overlapped")]
ENV_NAMES = {"alfworld": "ALFWorld", "webshop": "WebShop", "scienceworld": "ScienceWorld"}


def _rollout_note(src: Source) -> str:
    gpu = src("latency_models.gpu")
    return (f"the stub generator's GPU-like latency: {float(gpu['a_s']) * 1000:.0f} ms + "
            f"{float(gpu['b_s_per_prompt']) * 1000:.0f} ms per prompt, assumed, not measured; "
            f"{int(src.number('cpu_count'))} cores, 2-process parallelism {src.number('cpu_parallelism.2'):.2f}; "
            f"one run each, {src.number('seconds') / 60:.0f} min in all, {MEASURED['rollout_throughput.json']}")


@table("performance/rollout-throughput")
def rollout_throughput(results: Results) -> str:
    src = results.json("rollout_throughput.json")
    measured = [r for r in src("throughput") if r.get("model") == "gpu"]
    rows = []
    for env in dict.fromkeys(r["env"] for r in measured):
        ns = sorted({int(r["N"]) for r in measured if r["env"] == env})
        base_path, _ = _row(src, "throughput",
                            {"env": env, "model": "gpu", "pool": "w0", "mode": "lockstep", "N": ns[0]})
        base = src.number(base_path + ".trials_per_minute")
        for n in ns:
            cells = [ENV_NAMES.get(env, env), str(n)]
            for pool, mode, _label in ROLLOUT_POOLS:
                found = [r for r in measured if r["env"] == env and r["pool"] == pool and r["mode"] == mode
                         and int(r["N"]) == n]
                cells.append(ratio(float(found[0]["trials_per_minute"]) / base) if found else "-")
            rows.append(cells)
    header = ["env", "N", *[label for _p, _m, label in ROLLOUT_POOLS]]
    return (markdown_table(header, rows) + "\n"
            + sources("rollout_throughput.json", note="trials per minute over in-process lockstep at the smallest N; "
                      + _rollout_note(src)))


@table("performance/rollout-overlap")
def rollout_overlap(results: Results) -> str:
    src = results.json("rollout_throughput.json")
    gains = [g for g in src("overlap_gains") if g.get("model") == "gpu" and int(g["N"]) > 1]
    rows = []
    for env in dict.fromkeys(g["env"] for g in gains):
        for n in sorted({int(g["N"]) for g in gains if g["env"] == env}):
            cells = [ENV_NAMES.get(env, env), str(n)]
            for pool in ("w2", "ray"):
                found = [g for g in gains if g["env"] == env and g["pool"] == pool and int(g["N"]) == n]
                cells += ([ratio(float(found[0]["overlap_over_lockstep"])), ratio(float(found[0]["bound"]))]
                          if found else ["-", "-"])
            rows.append(cells)
    return (markdown_table(["env", "N", "2 workers", "bound", "Ray", "bound"], rows) + "\n"
            + sources("rollout_throughput.json", note="overlapped wall time over lockstep's, and the bound: lockstep's "
                      "time over the larger of its generation and its env part; " + _rollout_note(src)))


# ------------------------------------------------------------------------------------------ GPU check
GPU_RUNS = [("gpu_check_before.json", "before"), ("gpu_check.json", "after")]
GPU_STEPS = [("rulebook", "skillrise", "SkillRise"), ("rulebook", "grpo", "GRPO"),
             ("webshop", "skillrise", "SkillRise"), ("webshop", "grpo", "GRPO")]


def _gpu_note(before: Source, after: Source) -> str:
    said = []
    for src, name in ((before, "before"), (after, "after")):
        said.append(f"{name}: {src('environment.device')}, torch {src('environment.torch')}, started "
                    f"{src('started_utc')}")
    return "; ".join(said) + "; peak memory is torch.cuda.max_memory_allocated"


def _generation(src: Source, batch: int) -> float:
    path, _ = _row(src, "parts.generation.rows", {"batch_size": batch})
    return src.number(path + ".completion_tokens_per_s")


@table("performance/gpu-step")
def gpu_step(results: Results) -> str:
    before, after = (results.json(rel) for rel, _ in GPU_RUNS)
    rows = []
    for env, algo, label in GPU_STEPS:
        part = f"parts.train/{env}/{algo}"
        b, a = before.number(part + ".metrics.step_seconds"), after.number(part + ".metrics.step_seconds")
        rows.append([f"one step, {'WebShop' if env == 'webshop' else env}, {label}", f"{b:.1f} s", f"{a:.1f} s",
                     ratio(b / a)])
    batches = sorted({int(r["batch_size"]) for r in before("parts.generation.rows")}, reverse=True)
    for i, batch in enumerate([batches[0], 8] if 8 in batches and batches[0] != 8 else batches[:1]):
        b, a = _generation(before, batch), _generation(after, batch)
        label = (f"seeded generation, {batch} prompts of ~{after.number('parts.generation.prompt_tokens_mean'):.0f} "
                 f"tokens, {int(after.number('parts.generation.new_tokens'))} new tokens" if i == 0
                 else f"the same, {batch} prompts")
        rows.append([label, f"{b:.0f} tok/s", f"{a:.0f} tok/s", ratio(a / b)])

    def peak(src: Source) -> str:
        values = [src.number(f"parts.train/{env}/{algo}.peak_memory_mib") / 1024 for env, algo, _ in GPU_STEPS]
        low, high = f"{min(values):.1f}", f"{max(values):.1f}"
        return f"{low} GiB" if low == high else f"{low}-{high} GiB"

    rows.append(["peak GPU memory of a step", peak(before), peak(after), ""])
    config = after("parts.train/rulebook/skillrise.config")
    note = (f"one step is K={config['K']}, G={config['G']}, S={config['S']}, {config['max_task_steps']} task steps, "
            f"{config['max_new_tokens']} new tokens, LoRA, bf16; ratio: before / after for times, after / before for "
            "throughput; " + _gpu_note(before, after))
    return (markdown_table(["figure", "before", "after", "ratio"], rows) + "\n"
            + sources("gpu_check_before.json", "gpu_check.json", note=note))


@table("performance/gpu-update")
def gpu_update(results: Results) -> str:
    runs = [(results.json(rel), name) for rel, name in GPU_RUNS]
    rows = []
    for src, name in runs:
        budgets = src("parts.update.budgets")
        first = None
        for index, budget in enumerate(budgets):
            path = f"parts.update.budgets.{index}"
            tokens = int(src.number(path + ".micro_batch_tokens"))
            label = "sized from the GPU (-1)" if tokens == -1 else f"{tokens:,}"
            if "skipped" in budget:
                rows.append([name, label, "-", f"skipped: {budget['skipped']}", "-", "-"])
                continue
            rate = src.number(path + ".update_tokens_per_s")
            first = first if first is not None else rate
            rows.append([name, label, str(int(src.number(path + ".micro_batches"))), f"{rate:,.0f}",
                         ratio(rate / first), f"{src.number(path + '.peak_memory_mib'):,.0f} MiB"])
    src = runs[-1][0]
    note = (f"{int(src.number('parts.update.rows'))} rows of up to {int(src.number('parts.update.prompt_tokens_max'))} "
            f"prompt + {int(src.number('parts.update.completion_tokens_max'))} completion tokens "
            f"({int(src.number('parts.update.tokens_per_update')):,} tokens), LoRA, bf16 autocast, median of "
            f"{int(src.number('parts.update.repeats'))} updates; the ratio is to the run's first budget; a budget is "
            "skipped once the part's time cap is spent; " + _gpu_note(runs[0][0], runs[-1][0]))
    return (markdown_table(["run", "micro-batch budget (tokens)", "micro-batches", "update tokens/s",
                            "ratio", "peak GPU memory"], rows) + "\n"
            + sources("gpu_check_before.json", "gpu_check.json", note=note))


# ------------------------------------------------------------------------------------------ main job by setting
SETTINGS = [(("float32", "float32"), "float32 (the defaults)"),
            (("bfloat16", "float32"), "`--generation-dtype bfloat16`"),
            (("bfloat16", "bfloat16"), "`--generation-dtype bfloat16 --bf16`")]


@table("performance/main-job-step")
def main_job_step(results: Results) -> str:
    rows, said = [], []
    for rel in ("main_job.json", "main_job_2threads.json"):
        src = results.json(rel)
        base_path, base = _setting(src, "float32", "float32")
        threads = int(base["threads"])
        for (generation, update), label in SETTINGS:
            path, _ = _setting(src, generation, update)
            cells = [label, str(threads)]
            for key in ("generation_seconds", "update_seconds", "step_seconds"):
                value, reference = src.number(f"{path}.{key}"), src.number(f"{base_path}.{key}")
                if path == base_path:
                    cells.append(f"{value:.0f} s")
                else:
                    speed = ratio(reference / value)
                    speed = f"**{speed}**" if key == "step_seconds" and update == "bfloat16" else speed
                    cells.append(f"{value:.0f} s ({speed})")
            rows.append(cells)
        said.append(f"`{rel}`: {threads} thread{'s' if threads > 1 else ''}, {int(src.number('rounds'))} round, "
                    f"1-minute load {load(src('load_average_start'))} at the start and {load(src('load_average_end'))} "
                    f"at the end, torch {src('torch')}, {MEASURED[rel]}")
    note = ("ratios to float32 at the same thread count; " + "; ".join(said)
            + f"; {int(base['prompt_tokens']):,} prompt tokens in {int(base['calls'])} generation calls in float32")
    return (markdown_table(["setting", "threads", "generation", "update", "step"], rows) + "\n"
            + sources("main_job.json", "main_job_2threads.json", note=note))
