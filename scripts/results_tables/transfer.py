"""The transfer probe (SkillRise-Rulebook-v0): benchmarks/results/transfer_experiment.json, the tiny model at
R=1 over three RL seeds."""

from __future__ import annotations

from .core import Results, f2, interval, markdown_table, sources, table

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
    drawn = ", ".join(f"{s + 7}" for s in seeds)
    return (f"evaluation panels: generator seeds {drawn} (RL seed + 7, before named panels; seed 7 is the dev "
            "panel, used for design choices)")


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
