"""What the dev and test panels of the reported probe results share (docs/panels.md): counted exactly by
benchmarks/experiments/panel_overlap.py (tests/test_panels.py checks the file against the code and its test
panels' hashes against the decisive experiment's records)."""

from __future__ import annotations

from .core import Results, markdown_table, sources, table

FILE = "panel_overlap.json"


@table("panels/overlap")
def overlap(results: Results) -> str:
    src = results.json(FILE)
    rows = []
    for i, s in enumerate(src("settings")):
        for field in ("setting", "K", "sequences", "split_families", "split_tasks", "families", "tasks", "test_slots",
                      "test_slots_in_dev", "sequences_shared", "hash"):
            src(f"settings.{i}.{field}")  # a file of another shape names the field
        options = ", ".join(f"{k} {v}" for k, v in s["backend_options"].items())
        rows.append([f"{s['setting']} ({options}), K={s['K']}, {s['sequences']} sequences each",
                     f"{s['split_families']} / {s['split_tasks']}",
                     f"{s['families']['shared']} of {s['families']['test']} "
                     f"({s['families']['shared_if_independent']:g} if drawn independently)",
                     f"{s['tasks']['shared']} of {s['tasks']['test']}",
                     f"{s['test_slots_in_dev']} of {s['test_slots']}", str(s["sequences_shared"]),
                     f"`{s['hash']['test']}`"])
    header = ["panels (probe, split " + str(src("split")) + ")", "families / tasks in the split",
              "test-panel families also in dev", "test-panel tasks also in dev", "test-panel task slots also in dev",
              "sequences in both", "test panel hash"]
    return markdown_table(header, rows) + "\n" + sources(FILE, note="exact, not sampled; dev panel generator seed "
                                                        f"{src('panels.dev')}, test {src('panels.test')}")
