"""The decisive experiment (issue 43): benchmarks/results/decisive/decisive.json, the report that
`benchmarks/experiments/decisive_experiment.py report` writes from the stages' JSON. Rendered by the
experiment's own `markdown` (one renderer for decisive.md and the docs)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .core import Results, sources, table

REPORT = "decisive/decisive.json"
#: the first lineage's six stages, whose init could not be rebuilt with the same bits (a pilot, on its own)
LINEAGE_1 = "decisive/lineage-1/decisive.json"
NOTE = "the test panel (generator seed 20261206), used once"


@table("decisive/report")
def report(results: Results) -> str:
    if not (results.folder / REPORT).is_file():
        return ("*Not reported yet: the stages are committed to `benchmarks/results/decisive/` as they finish, and "
                "`python benchmarks/experiments/decisive_experiment.py report` writes `decisive.json` from them; "
                "this block is rendered from that file.*")
    return rendered(results, REPORT)


@table("decisive/verdicts")
def verdicts(results: Results) -> str:
    """The experiment's verdicts alone (the README's headline): one row per planned comparison, landed or not."""
    if not (results.folder / REPORT).is_file():
        return report(results)
    _experiment()
    from benchmarks.experiments.decisive_experiment import verdicts as table_of

    src = results.json(REPORT)
    for field in ("measure", "interval", "verdict_rule", "r2", "r1", "stages_done", "stages_left"):
        src(field)
    data = src.data
    done = len(data["stages_done"])
    return (table_of(data) + f"\n\nMeasure: {data['measure']}. Intervals: {data['interval']}. Verdict: "
            f"{data['verdict_rule']}. Stages done: {done} "
            f"of {done + len(data['stages_left'])}.\n" + sources(REPORT, note=NOTE))


@table("decisive/lineage-1")
def lineage_1(results: Results) -> str:
    text = rendered(results, LINEAGE_1, level="####")
    # its stages-left line is the whole experiment's as it stood then: the lineage itself stopped there
    return re.sub(r"^Stages done: .*\n\n", "", text, count=1, flags=re.M)


def rendered(results: Results, name: str, level: str = "###") -> str:
    """The report in `name` by the experiment's own `markdown`, without its title, its sections at `level`."""
    _experiment()
    from benchmarks.experiments.decisive_experiment import markdown

    src = results.json(name)
    for field in ("measure", "interval", "stages_done", "stages_left", "r2", "r1", "reference"):
        src(field)  # a report of another shape names the file and the field
    text = markdown(src.data).split("\n", 1)[1].strip()  # without its own title
    text = re.sub(r"^## ", level + " ", text, flags=re.M)
    return text + "\n" + sources(name, note=NOTE)


def _experiment() -> None:
    """Make `benchmarks.experiments.decisive_experiment` importable: the renderer uses the experiment's own code."""
    root = Path(__file__).resolve().parents[2]  # the repository: benchmarks/ is a package there
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
