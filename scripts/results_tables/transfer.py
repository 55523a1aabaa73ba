"""The transfer probe (SkillRise-Rulebook-v0) at R=1 with the tiny model: benchmarks/results/transfer_experiment.json
(three RL seeds) and the held-out-answer runs (novel_kinds/, novel_colours/); and the helpers the other transfer
pages' tables share (transfer_r2.py, lamer.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .core import RenderError, Results, Source, f2, interval, markdown_table, sources, table

#: the arms' names in the tables, in order
POLICIES = {
    "untrained": "warm start only",
    "skillrise": "**SkillRise** (curate credit future)",
    "own": "curate credit own",
    "none": "curate credit none",
    "grpo": "GRPO",
    "gigpo": "GiGPO",
}


def legacy_panels(seeds: list[int]) -> str:
    """Runs made before named panels (skillrise_gym.panels) evaluated each RL seed on generator seed
    seed + 7; seed 0's is the dev panel (7)."""
    seeds = sorted(set(int(s) for s in seeds))
    drawn = ", ".join(f"{s + 7}" for s in seeds)
    if len(seeds) == 1:
        dev = ("the dev panel, used for design choices" if seeds[0] == 0
               else "a panel of its own, not paired with other seeds' runs")
        return (f"evaluation panel: generator seed {drawn} (RL seed {seeds[0]} + 7, before named panels; {dev})")
    return (f"evaluation panels: generator seeds {drawn} (RL seed + 7, before named panels; seed 7 is the dev "
            "panel, used for design choices)")


def panel_of(src: Source) -> str:
    """The panel a transfer_experiment JSON's evaluations played: its own "panel" fields where it records them
    (runs since named panels), else the legacy RL seed + 7 (`legacy_panels`)."""
    named = {(e["panel"].get("name"), e["panel"].get("seed")) for e in src("evaluations").values()
             if isinstance(e, dict) and isinstance(e.get("panel"), dict)}
    if named:
        return "evaluation panel: " + ", ".join(f"{name} (generator seed {seed})" for name, seed in sorted(named))
    seeds = src("preset.seeds", None) or [src("preset.seed")]
    return legacy_panels([int(s) for s in seeds])


def panel_cell(src: Source) -> str:
    """A table cell naming the panel of one single-seed transfer_experiment JSON."""
    named = {e["panel"].get("name") for e in src("evaluations").values()
             if isinstance(e, dict) and isinstance(e.get("panel"), dict)}
    if named:
        return ", ".join(sorted(named))
    seed = int(src("preset.seed"))
    return f"generator seed {seed + 7}" + (" (dev)" if seed == 0 else "")


# ------------------------------------------------------------------------------------------ cells
def rate(s: dict) -> str:
    """A success rate with its 95% CI (or range over seeds): "0.64 [0.58, 0.70]"."""
    return f"{f2(s['mean'])} {interval(s['ci'])}"


def positions(by_position: Sequence[dict | float], flat: bool = False) -> str:
    """Per-position means, "0.32 / 0.72 / ..."; with `flat`, "0.20 flat" when every position is the same."""
    means = [f2(p["mean"] if isinstance(p, dict) else p) for p in by_position]
    if flat and len(set(means)) == 1:
        return f"{means[0]} flat"
    return " / ".join(means)


def d3(x: float, sign: bool = False) -> str:
    """A difference as paired_positions.py stores it (3 decimals), shown with 2 or 3: +0.07, -0.145."""
    x = round(float(x), 3) + 0.0
    s = f"{x:+.3f}" if sign else f"{x:.3f}"
    return s[:-1] if s.endswith("0") else s


def paired_cell(run: dict[str, Any]) -> str:
    """A paired_positions.py run: "+0.105 [0.03, 0.18]"."""
    return f"{d3(run['difference'], sign=True)} [{d3(run['ci'][0])}, {d3(run['ci'][1])}]"


def block(src: Source, arm: str, carry: str, K: int | str) -> dict:
    """One evaluation block of a transfer_experiment JSON: success, success_by_position."""
    return src(f"evaluations.{arm}.by_carry.{carry}.{K}")


def documents(src: Source, arm: str, K: int | str, fields: Sequence[str]) -> str:
    """What an arm's documents hold at K (documents.py's shares), "0.64 / 0.73 / 0.00"."""
    return " / ".join(f2(src.number(f"evaluations.{arm}.documents.{K}.{f}")) for f in fields)


def only_seed(src: Source) -> int:
    """The RL seed of a single-seed transfer_experiment JSON."""
    if src("preset.seeds", None):
        raise RenderError(f"{src.rel}: several seeds ({src('preset.seeds')}); this table reads one seed's run")
    return int(src("preset.seed"))


@table("transfer/r1-tiny")
def r1_tiny(results: Results) -> str:
    src = results.json("transfer_experiment.json")
    seeds = [int(s) for s in src("preset.seeds")]
    ks = [str(k) for k in src("preset.eval_K")]
    n = int(src.number("preset.eval_sequences"))
    rows = []
    for arm, label in POLICIES.items():
        if arm not in src("evaluations"):
            continue
        cells = [label]
        for k in ks:
            s = src(f"evaluations.{arm}.by_carry.skill.{k}.success")
            cells.append(f"{f2(s['mean'])} {interval(s['ci'])}" if len(seeds) > 1 else f2(s["mean"]))
        by_position = src(f"evaluations.{arm}.by_carry.skill.{ks[-1]}.success_by_position")
        cells.append(" / ".join(f2(p["mean"]) for p in by_position))
        rows.append(cells)
    perfect = [float(x) for x in src("ceilings.perfect_curator")]
    ignore = [float(x) for x in src("ceilings.ignore_document")]
    rows.append(["ceiling: perfect curator (scripted)",
                 *[f2(sum(perfect[:int(k)]) / int(k)) for k in ks],
                 " / ".join(f2(x) for x in perfect[:int(ks[-1])])])
    rows.append(["ceiling: ignore the document", *[f2(sum(ignore[:int(k)]) / int(k)) for k in ks],
                 " / ".join(f2(x) for x in ignore[:int(ks[-1])])])
    header = ["policy (carry skill)", *[f"K={k}" for k in ks], f"by position, K={ks[-1]}"]
    spread = "mean over RL seeds " + ", ".join(map(str, seeds)) + " [min, max over seeds]" if len(seeds) > 1 else ""
    return (markdown_table(header, rows) + "\n"
            + sources("transfer_experiment.json",
                      note=f"{spread}; {n} held-out sequences per seed and K; {legacy_panels(seeds)}"))


@table("transfer/r1-novel")
def r1_novel(results: Results) -> str:
    """Held-out answers (`--novel kinds`, `--novel colours`): the scripted perfect curator, the warm start and
    SkillRise, carry skill, by position at the largest evaluated K."""
    runs = {"novel kinds": "novel_kinds/transfer_experiment.json",
            "novel colours": "novel_colours/transfer_experiment.json"}
    srcs = {name: results.json(rel) for name, rel in runs.items()}
    ks = {str(src("preset.eval_K")[-1]) for src in srcs.values()}
    seeds = {only_seed(src) for src in srcs.values()}
    ns = {int(src.number("preset.eval_sequences")) for src in srcs.values()}
    if len(ks) != 1 or len(seeds) != 1 or len(ns) != 1:
        raise RenderError(f"{', '.join(runs.values())}: the two runs differ in K, seed or sequences "
                          f"({ks}, {seeds}, {ns}); this table puts them side by side")
    K, seed, n = ks.pop(), seeds.pop(), ns.pop()
    rows = []
    for arm, label in (("perfect-curator", "perfect curator (scripted)"), ("untrained", "warm start only"),
                       ("skillrise", "SkillRise")):
        cells = [label]
        for src in srcs.values():
            cell = positions(block(src, arm, "skill", K)["success_by_position"])
            if arm == "skillrise" and f"evaluations.{arm}.by_carry.none.{K}" in src:
                cell += f" (carry none: {positions(block(src, arm, 'none', K)['success_by_position'], flat=True)})"
            cells.append(cell)
        rows.append(cells)
    return (markdown_table([f"held out, K={K}, carry skill", *runs], rows) + "\n"
            + sources(*runs.values(), note=f"success by position; RL seed {seed}, {n} held-out sequences each; "
                                           f"{legacy_panels([seed])}"))
