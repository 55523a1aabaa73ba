"""The memory methods in the bench (docs/memory.md): benchmarks/results/memory_methods/<run>/compare.json, the
table `skillrise-bench compare` wrote, with the run's summary.json for the panel and the settings."""

from __future__ import annotations

from .bench import CI_WORDS, MARK, ci_legend
from .core import RenderError, Results, f2, interval, markdown_table, signed, sources, table

def _mode(name: str) -> str:
    """A compare row's name is "RUN:MODE"; the tables name the mode."""
    return name.rsplit(":", 1)[-1]


def _signed_interval(ci: list[float]) -> str:
    return f"[{signed(ci[0])}, {signed(ci[1])}]"


def memory_table(results: Results, run: str, score: bool) -> str:
    compare = results.json(f"memory_methods/{run}/compare.json")
    summary = results.json(f"memory_methods/{run}/summary.json")
    ks = [str(k) for k in compare("K")]
    if len(ks) != 1:
        raise RenderError(f"{compare.rel}: K {compare('K')}: this table shows one K")
    k = ks[0]
    reference = _mode(compare("reference"))
    methods: set[str] = set()
    diff_methods: set[str] = set()
    panels: set[str] = set()
    rows = []
    for i in range(len(compare("rows"))):
        at = f"rows.{i}.by_K.{k}"
        success = compare(f"{at}.success")
        method = compare(f"{at}.success.method")
        methods.add(method)
        panels.add(str(compare(f"{at}.panel")))
        cells = [f"`{_mode(compare(f'rows.{i}.name'))}`", str(int(compare.number(f"{at}.sequences"))),
                 f"{f2(success['mean'])} {interval(success['ci'])}{MARK.get(method, '')}"]
        if score:
            cells.append(f"{compare.number(f'{at}.score.mean'):.3f}")
        if f"{at}.difference" in compare:
            diff = compare(f"{at}.difference")
            diff_methods.add(compare(f"{at}.difference.method"))
            cells.append(f"{signed(diff['mean'])} {_signed_interval(diff['ci'])}")
        else:
            cells.append("reference")
        cells.append(" / ".join(f2(p) for p in compare(f"{at}.success_by_position")))
        cost = f"{at}.cost_per_task"
        cells += [f"{compare.number(f'{cost}.tokens'):,.0f}", f"{compare.number(f'{cost}.model_calls'):.2f}",
                  f"{100 * compare.number(f'{cost}.curate_share_of_tokens'):.0f}%"]
        rows.append(cells)
    if len(panels) != 1:
        raise RenderError(f"{compare.rel}: rows on {len(panels)} panels ({sorted(panels)}); this table pairs "
                          "rows of one panel")
    ci_legend(diff_methods, compare)  # an unknown method is an error
    header = ["mode", "seqs", "success [95% CI]", *(["score (mean reward)"] if score else []),
              f"vs `{reference}` [95% CI]", "by position", "tokens/task", "calls/task", "curate share"]
    block = next((b for b in summary(f"by_carry.{reference}.blocks") if str(b.get("K")) == k), None)
    if block is None:
        raise RenderError(f"{summary.rel}: no summary block with K={k} (a results table reads it)")
    panel = block.get("panel") or {}
    panel_words = (f"the {panel['name']} panel (generator seed {panel['seed']}, hash {panel['hash']})"
                   if panel.get("name") else f"sequences drawn with seed {int(summary.number('seed'))}")
    if panel.get("hash") is not None and str(panel["hash"]) not in panels:
        raise RenderError(f"{summary.rel}: panel hash {panel['hash']} is not the compare table's {sorted(panels)}")
    agent = summary("agent")
    steps = int(summary.number("max_task_steps"))
    sampling = ", ".join(f"{key} {agent[key]}" for key in ("dtype", "temperature") if key in agent)
    said = ci_legend(methods, compare)
    note = (f"{summary('env')}, split {summary('split')}, K={k}, {int(summary.number('num_sequences'))} sequences "
            f"of {panel_words}, {summary('mode')} mode, {summary('prompt_style')} prompts, at most {steps} "
            f"step{'s' if steps != 1 else ''} a task; agent `{agent.get('name')}` "
            f"`{agent.get('model')}` ({sampling}); "
            f"success CIs as compare.json records them: {said}; paired differences from `{reference}` on the same "
            f"sequences: {' and '.join(CI_WORDS[m].split(' (')[0] for m in sorted(diff_methods))}; tokens and calls "
            "per task include the curate turns, whose share of tokens is the last column")
    return (markdown_table(header, rows) + "\n"
            + sources(f"memory_methods/{run}/compare.json", f"memory_methods/{run}/summary.json", note=note))


@table("memory/rulebook-smollm2")
def rulebook_smollm2(results: Results) -> str:
    return memory_table(results, "rulebook_smollm2", score=False)


@table("memory/webshop-smollm2")
def webshop_smollm2(results: Results) -> str:
    return memory_table(results, "webshop_smollm2", score=True)
