"""The LaMer comparison on the transfer probe (docs/results/lamer.md): benchmarks/results/lamer/ (feedback
`success`: a wrong answer names only the wrong bin) and lamer_full/ (full feedback, the control), each a
transfer_experiment.py run with cross-mode and repeat-mode (Pass@k) evaluations."""

from __future__ import annotations

from .core import RenderError, Results, Source, markdown_table, sources, table
from .transfer import block, only_seed, panel_of, positions

#: how a run's feedback setting reads in the table
FEEDBACK = {"success": "feedback success", "full": "full feedback"}

#: (label, results folder, arm, carry mode); the feedback is the run's own
ROWS = [
    ("perfect curator (scripted)", "lamer", "perfect-curator", "skill"),
    ("latest revelation only (scripted)", "lamer", "latest-rule-only", "skill"),
    ("SkillRise (carry skill)", "lamer", "skillrise", "skill"),
    ("LaMer (carry reflect)", "lamer", "lamer", "reflect"),
    ("LaMer's warm start alone (reflect)", "lamer", "untrained-lamer", "reflect"),
    ("LaMer (reflect), {feedback} (second attempt trivial)", "lamer_full", "lamer", "reflect"),
    ("SkillRise's warm start, carry reflect, {feedback}", "lamer_full", "untrained", "reflect"),
]


def feedback(src: Source) -> str:
    value = src("preset.feedback")
    if value not in FEEDBACK:
        raise RenderError(f"{src.rel}: field 'preset.feedback' is {value!r}, not one this table knows")
    return FEEDBACK[value]


@table("lamer/feedback")
def lamer_feedback(results: Results) -> str:
    srcs = {folder: results.json(f"{folder}/transfer_experiment.json") for folder in ("lamer", "lamer_full")}
    ks = {str(src("preset.eval_K")[-1]) for src in srcs.values()} | {str(int(src.number("preset.repeat_k")))
                                                                       for src in srcs.values()}
    if len(ks) != 1:
        raise RenderError("benchmarks/results/lamer*/transfer_experiment.json: the runs differ in K or repeat K "
                          f"({sorted(ks)}); this table puts them side by side")
    K = ks.pop()
    seeds = {only_seed(src) for src in srcs.values()}
    ns = {int(src.number("preset.eval_sequences")) for src in srcs.values()}
    notes = {panel_of(src) for src in srcs.values()}
    if len(seeds) != 1 or len(ns) != 1 or len(notes) != 1:
        raise RenderError("benchmarks/results/lamer*/transfer_experiment.json: the runs differ in seed, sequences or "
                          "panel; this table puts them side by side")
    rows = []
    for label, folder, arm, carry in ROWS:
        src = srcs[folder]
        said = label.format(feedback=feedback(src))
        if "{feedback}" not in label:
            said += f", {feedback(src)}"
        cross = block(src, arm, carry, K)["success_by_position"]
        repeat = src(f"evaluations.{arm}.repeat.{carry}.pass_at_k")
        rows.append([said, positions(cross), positions(repeat)])
    header = [f"held out, seed {seeds.pop()}", f"cross K={K} by position",
              "repeat Pass@" + "/".join(str(k) for k in range(1, int(K) + 1))]
    return (markdown_table(header, rows) + "\n"
            + sources(*(f"{folder}/transfer_experiment.json" for folder in srcs),
                      note=f"{ns.pop()} held-out sequences in each mode; {notes.pop()}"))
