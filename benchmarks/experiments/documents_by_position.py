"""What the R=2 transfer probe's curated documents hold, by curate position, and whether curate completions
close their tag or run to the token budget, from transfer_experiment work dirs (their turns.jsonl files).

For each WORK dir (its SkillRise arm, or --arm; the probe's R, N and held-out option are read from the arm's
config.json): at the held-out evaluation (carry skill, greedy, at its largest K), per curate position, the shares of `skillrise_gym.documents.document_stats` (every rule revealed so far, the
latest, keeping alone, instance words); and the share of curate completions that hold the closing </skill>
tag and that ran to the token budget (--budget, the runs' --max-new-tokens), at the evaluation and by block of
20 training steps; and `repeats_a_clause`, the share of curate documents at that position that state one clause
twice ("and wood items go in the yellow bin; and wood items go in the yellow bin").

    python benchmarks/experiments/documents_by_position.py runs/r2_rf16k5 runs/r2_rf16ol > documents_by_position.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repo root (benchmarks/<kind>/<name>.py)
if str(ROOT) not in sys.path:  # run as a file
    sys.path.insert(0, str(ROOT))

EVALUATION = "eval-bench/{arm}/carry-skill/turns.jsonl"  # a work dir's held-out turns of one arm
TRAINING = "{arm}/turns.jsonl"  # and its training turns (none of them curate turns for grpo)
CONFIG = "{arm}/config.json"  # and its TrainConfig (backend_options: rules, bins, novel...)


def paths(work: Path, arm: str) -> tuple[Path, Path, Path]:
    """The arm's held-out turns with carry skill (in the arm's folder itself when carry skill was its only
    carry mode, `--eval-carry skill`), its training turns and its TrainConfig."""
    from skillrise_gym.bench.store import carry_run_dir

    return (carry_run_dir(work / "eval-bench" / arm, "skill") / "turns.jsonl", work / TRAINING.format(arm=arm),
            work / CONFIG.format(arm=arm))


def closed_and_cut(rows: list[dict], budget: int) -> dict[str, float]:
    return {"closed": round(sum("</skill>" in (r.get("response") or "") for r in rows) / len(rows), 3),
            "cut": round(sum((r.get("completion_tokens") or 0) >= budget for r in rows) / len(rows), 3)}


def repeats_a_clause(rows: list[dict]) -> float:
    """The share of curate turns whose document states one clause twice."""
    from skillrise_gym.documents import clauses
    from skillrise_gym.prompts import parse_skill

    documents = [[" ".join(c.lower().split()) for c in clauses(parse_skill(r.get("response") or "").document)]
                 for r in rows]
    return round(sum(len(set(d)) < len(d) for d in documents) / len(documents), 3) if documents else 0.0


def summarise(work: Path, budget: int = 48, arm: str = "skillrise") -> dict:
    from skillrise_gym.backends.rulebook import RulebookBackend
    from skillrise_gym.documents import document_stats
    from skillrise_gym.records import iter_jsonl

    held_out, trained, config = paths(work, arm)
    options = json.loads(config.read_text()).get("backend_options") or {}
    tasks = {t.id: t for t in RulebookBackend(**options).list_tasks("test")}
    rows = list(iter_jsonl(held_out))
    if not rows:
        raise ValueError(f"{held_out} holds no turn (an evaluation that never ran?)")
    K = max(int(r["extra"]["K"]) for r in rows)
    rows = [r for r in rows if r["extra"]["K"] == K]
    by_position = []
    for position in range(K - 1):
        held = document_stats([r for r in rows if r["role"] == "solve" or int(r["position"]) == position],
                              tasks.get, lambda name: RulebookBackend)
        by_position.append({**{k: round(held[k], 3) for k in ("states_all", "states_latest", "keeps_earlier",
                                                                "instance_words") if k in held},
                            "repeats_a_clause": repeats_a_clause([r for r in rows if r["role"] == "curate"
                                                                  and int(r["position"]) == position])})
    steps: dict[int, list[dict]] = {}
    for row in iter_jsonl(trained):
        if row["role"] == "curate":
            steps.setdefault(int(row["extra"]["step"]), []).append(row)
    keys = sorted(steps)
    training = [{"steps": [keys[a], keys[min(a + 19, len(keys) - 1)]],
                 **closed_and_cut([r for k in keys[a:a + 20] for r in steps[k]], budget)} for a in range(0, len(keys), 20)]
    return {"arm": arm, "probe": {**options, "K": K}, "evaluation_by_curate_position": by_position,
            "evaluation_curate": closed_and_cut([r for r in rows if r["role"] == "curate"], budget),
            "training_curate": training}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Prints the JSON to stdout; the committed ones are under benchmarks/results/ "
                                            "(e.g. r2_smollm2/k5_overlong/documents_by_position.json).")
    parser.add_argument("work", nargs="+", help="transfer_experiment --work-dir folders")
    parser.add_argument("--budget", type=int, default=48, help="the runs' --max-new-tokens (what counts as a cut)")
    parser.add_argument("--arm", default="skillrise", help="the trained arm whose documents are read (skillrise, "
                        "own, none, grpo...: at the evaluation every arm curates with carry skill)")
    args = parser.parse_args(argv)
    if args.budget < 1:
        parser.error(f"--budget must be the runs' --max-new-tokens, an integer >= 1, got {args.budget}")
    for work in args.work:
        for path in paths(Path(work), args.arm):
            if not path.is_file():
                parser.error(f"{work} holds no {path.relative_to(work)}: not a transfer_experiment work dir "
                             f"with a trained {args.arm!r} arm")
    runs = {}
    for work in args.work:
        try:
            runs[Path(work).name] = summarise(Path(work), args.budget, args.arm)
        except (ValueError, KeyError, TypeError, OSError) as exc:  # a damaged or empty record, an unreadable config
            parser.error(f"{work}: cannot read the {args.arm!r} arm's records: {exc}")
    print(json.dumps({"what": __doc__.split("\n\n")[0].replace("\n", " "), "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
