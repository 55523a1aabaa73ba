"""The Rulebook probe's ceilings (docs/rulebook.md; docs/benchmarks.md links to it): success by position for an
agent that ignores the document and for a perfect curator, computed exactly by `RulebookBackend.ceilings` and
committed by benchmarks/experiments/rulebook_ceilings.py (tests/test_rulebook.py checks the file against the
code)."""

from __future__ import annotations

from .core import Results, markdown_table, sources, table
from .transfer import positions

FILE = "rulebook_ceilings.json"


@table("rulebook/ceilings")
def ceilings(results: Results) -> str:
    src = results.json(FILE)
    K = int(src.number("K"))
    rows = []
    for setting in src("settings"):
        label = f"R={setting['rules']}, N={setting['bins']}, {setting['split']} split"
        rows.append([label, positions(setting["ignore_document"], flat=True), positions(setting["perfect_curator"])])
    header = ["setting (default families)", f"document ignored, K={K} by position",
              f"perfect curator, K={K} by position"]
    return markdown_table(header, rows) + "\n" + sources(FILE, note="exact, not sampled")
