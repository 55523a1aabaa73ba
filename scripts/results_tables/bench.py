"""The bench's reference agents and the backends' measured figures: docs/bench.md (expert and random agents
through `skillrise-bench`, benchmarks/results/bench_reference/) and docs/benchmarks.md (the parity and speed
measurements of benchmarks/parity/, benchmarks/results/{alfworld_env,webshop_lucene_compare,scienceworld_env,
scienceworld_memory,scienceworld_memory_expert}.json)."""

from __future__ import annotations

from .core import RenderError, Results, Source, f2, interval, markdown_table, sources, table

#: the runs of docs/bench.md's table, in its order: (folder under bench_reference/, env, agent); a run not
#: committed is not shown (ScienceWorld's JVM runs are not measured there)
REFERENCE_RUNS = [
    ("alfworld_expert", "ALFWorld", "expert"),
    ("alfworld_random", "ALFWorld", "random"),
    ("webshop_expert", "WebShop", "expert"),
    ("webshop_random", "WebShop", "random"),
    ("scienceworld_expert", "ScienceWorld", "expert"),
    ("scienceworld_random", "ScienceWorld", "random"),
]

#: how each CI method a bench summary records is said (skillrise_gym/bench/metrics.py)
CI_WORDS = {
    "wilson": "Wilson score interval (every sequence's value 0 or 1)",
    "bootstrap": "percentile bootstrap over sequences (per-sequence values not all 0 or 1)",
}
#: the mark a table cell gets after a CI of that method
MARK = {"wilson": "", "bootstrap": " †"}


def ci_legend(methods: set[str], src: Source) -> str:
    """What the marks after a table's CIs mean, for the methods the JSON recorded; an unknown method is an
    error naming the file."""
    unknown = methods - set(CI_WORDS)
    if unknown:
        raise RenderError(f"{src.rel}: unknown CI method(s) {sorted(unknown)} (a results table knows "
                          f"{sorted(CI_WORDS)})")
    return "; ".join(f"{MARK[m].strip()} {CI_WORDS[m]}" if MARK[m] else CI_WORDS[m]
                     for m in sorted(methods, key=lambda m: MARK[m]))


def _block(src: Source, k: str) -> tuple[int, dict]:
    """The summary block of K = k (its index in `blocks`, and the block)."""
    for i, block in enumerate(src("blocks")):
        if str(block.get("K")) == k:
            return i, block
    raise RenderError(f"{src.rel}: no summary block with K={k} (a results table reads it)")


@table("bench/reference")
def reference(results: Results) -> str:
    """Expert and random agents on pinned sequences: success per K with the CI the summary records, success by
    position, score, steps per task and wall seconds per sequence at the largest K."""
    runs = [(folder, env, agent) for folder, env, agent in REFERENCE_RUNS
            if (results.folder / "bench_reference" / folder / "summary.json").is_file()]
    if not runs:
        raise RenderError("benchmarks/results/bench_reference/: no <env>_<agent>/summary.json (docs/bench.md's "
                          "table reads them)")
    files = [f"bench_reference/{folder}/summary.json" for folder, _, _ in runs]
    srcs = [results.json(f) for f in files]
    ks = [str(k) for k in srcs[0]("K")]
    last = ks[-1]
    rows, methods, commits = [], set(), set()
    drawn: dict[str, None] = {}  # how the sequences were drawn, once per distinct wording
    per_env: dict[str, str] = {}  # env -> split and step limit
    for (folder, env, agent), src in zip(runs, srcs):
        if [str(k) for k in src("K")] != ks:
            raise RenderError(f"{src.rel}: K {src('K')} differs from {srcs[0].rel}'s {srcs[0]('K')} (one table "
                              "shows one set of K)")
        if src("status") != "complete":
            raise RenderError(f"{src.rel}: status {src('status')!r}, not 'complete'")
        cells = [env, agent]
        for k in ks:
            i, _ = _block(src, k)
            success = src(f"blocks.{i}.success")
            method = src(f"blocks.{i}.success.method")
            methods.add(method)
            cells.append(f"{f2(success['mean'])} {interval(success['ci'])}{MARK.get(method, '')}")
        i, _ = _block(src, last)
        cells.append(" / ".join(f2(p["mean"]) for p in src(f"blocks.{i}.success_by_position")))
        cells.append(" / ".join(f2(src.number(f"blocks.{_block(src, k)[0]}.score.mean")) for k in ks))
        cells.append(f"{src.number(f'blocks.{i}.steps_per_task.mean'):.1f}")
        cells.append(f"{src.number(f'blocks.{i}.sequence_wall_seconds.mean'):.2f}")
        rows.append(cells)
        panel = src(f"blocks.{i}.panel.name", None)
        drawn[(f"{int(src.number(f'blocks.{i}.sequences'))} sequences per K, {src('mode')} mode, drawn with seed "
               f"{int(src.number('seed'))} ({'the ' + panel + ' panel' if panel else 'no named panel'}), "
               f"env workers: {int(src.number('session.workers'))}")] = None
        per_env[env] = f"{env}: split {src('split')}, step limit {int(src.number('max_task_steps'))}"
        commits.add(str(src("fingerprint.software.commit"))[:7])
    header = ["env", "agent", *[f"K={k} success [95% CI]" for k in ks], f"K={last} success by position",
              "score " + " / ".join(f"K={k}" for k in ks), f"steps/task (K={last})", f"s/seq (K={last})"]
    code = f"code of commit{'s' if len(commits) > 1 else ''} {', '.join(sorted(commits))}"
    note = (f"success CIs as each summary records them: {ci_legend(methods, srcs[0])}; "
            + "; ".join([*drawn, *per_env.values(), code])
            + "; s/seq is wall time on the machine that ran it, shared with other jobs")
    return markdown_table(header, rows) + "\n" + sources(*files, note=note)


@table("benchmarks/webshop-search")
def webshop_search(results: Results) -> str:
    src = results.json("webshop_lucene_compare.json")
    rows = []
    for i in range(len(src("rankings"))):
        queries = int(src.number(f"rankings.{i}.queries"))
        distinct = int(src.number(f"rankings.{i}.distinct_queries"))
        rows.append([src(f"rankings.{i}.name"), f"{queries} ({distinct} distinct)",
                     f"{int(src.number(f'rankings.{i}.identical_top50_order'))} of {queries}",
                     f"{int(src.number(f'rankings.{i}.identical_top10_order'))} of {queries}"])
    docs_differ = int(src.number("documents.token_stream_differs"))
    note = (f"`benchmarks/parity/webshop_lucene_compare.py` against Lucene {src('oracle.lucene')}, Anserini "
            f"{src('oracle.anserini')}, on the catalog {src('catalog.source')} ({int(src.number('catalog.products'))} "
            f"products); catalog documents tokenised differently: {docs_differ}")
    return (markdown_table(["queries", "count", "same top 50, same order", "same top 10, same order"], rows)
            + "\n" + sources("webshop_lucene_compare.json", note=note))
