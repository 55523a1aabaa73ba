"""A policy against a reference row on the same held-out sequences: the paired difference in success at
positions >= FROM (mean over those positions per sequence, then over sequences, bootstrap 95% CI over
sequences), from transfer_experiment work dirs.

The experiment evaluates every policy on the same held-out sequences (one evaluation seed), so the
per-sequence difference removes what the draw of families and tasks adds to each row's own CI. Position 0
is left out by default: nothing is known there, and a scripted agent's first guess is not a policy's.

    python benchmarks/experiments/paired_positions.py runs/r2_cur runs/r2_cur_s1 --arm skillrise --reference latest-rule-only
    python benchmarks/experiments/paired_positions.py runs/r2_cur --reference own --reference-work runs/r2_cur_own

With several WORK dirs (runs of other seeds), "pooled" is every run's per-sequence differences together,
with one bootstrap CI over all of them.

`--reference-work` takes the reference row from another work dir evaluated on the same panel, e.g. an arm
trained in a run of its own. Rows are paired by sequence id, and only on one panel: rows whose manifests
name another probe (env, split, mode, step limit, backend options such as R and N), or whose sequences hash
to another panel (`skillrise_gym.panels`; both hashes are named), are refused.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]  # the repo root (benchmarks/<kind>/<name>.py)
if str(ROOT) not in sys.path:  # run as a file
    sys.path.insert(0, str(ROOT))

from skillrise_gym.panels import PanelMismatch, check_same_panel  # noqa: E402, F401 (PanelMismatch: raised)


def results_path(work: Path, name: str) -> Path:
    """A row's held-out results (carry skill): policies have carry-* folders, scripted rows one folder."""
    from skillrise_gym.bench.store import carry_run_dir

    return carry_run_dir(work / "eval-bench" / name, "skill") / "results.jsonl"


def per_sequence(path: Path, K: int, start: int) -> dict[str, float]:
    """sequence id -> mean success at positions >= start, for the sequences of length K."""
    from skillrise_gym.records import iter_jsonl

    return {r["sequence_id"]: float(np.mean(r["success"][start:])) for r in iter_jsonl(path) if r["K"] == K}


#: what a row's manifest must share with the other row's for their sequence ids to name the same tasks
SAME_PROBE = ("env", "split", "mode", "max_task_steps", "backend_options")


def probe(results: Path) -> dict:
    """The settings of a row's evaluation that decide what its sequence ids hold (its manifest's identity)."""
    manifest = results.parent / "manifest.json"
    identity = json.loads(manifest.read_text()).get("identity", {}) if manifest.is_file() else {}
    return {key: identity.get(key) for key in SAME_PROBE}


def matched(work: Path, arm: str, reference: str, K: int, start: int,
            reference_work: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per sequence both played (sorted by id): `arm`'s and `reference`'s (from `reference_work`, default
    `work`) mean success at positions >= start."""
    mine, other = results_path(work, arm), results_path(reference_work or work, reference)
    if probe(mine) != probe(other):
        raise ValueError(f"{arm} and {reference} were evaluated on different probes: {probe(mine)} vs {probe(other)}")
    check_same_panel((f"{arm} ({mine.parent})", panel(mine, K)), (f"{reference} ({other.parent})", panel(other, K)))
    ours, theirs = per_sequence(mine, K, start), per_sequence(other, K, start)
    common = sorted(ours)
    if not common:
        raise ValueError(f"{work}: {arm} played no sequence of length {K}")
    return np.array([ours[s] for s in common]), np.array([theirs[s] for s in common])


def panel(results: Path, K: int) -> str:
    """The hash of the panel a row's sequences of length K played (`skillrise_gym.panels.records_hash`)."""
    from skillrise_gym.panels import records_hash
    from skillrise_gym.records import iter_jsonl

    where = probe(results)
    return records_hash(where["env"], where["split"], where["backend_options"] or {},
                        [r for r in iter_jsonl(results) if r["K"] == K])


def difference(diffs: np.ndarray) -> dict:
    """The mean per-sequence difference and its bootstrap 95% CI over sequences."""
    from skillrise_gym.bench.metrics import bootstrap_ci

    low, high = bootstrap_ci(diffs)
    return {"difference": round(float(diffs.mean()), 3), "ci": [round(float(low), 3), round(float(high), 3)]}


def paired(work: Path, arm: str, reference: str, K: int, start: int, reference_work: Path | None = None) -> dict:
    """`arm` minus `reference` (from `reference_work`, default `work`) on the sequences both played."""
    a, b = matched(work, arm, reference, K, start, reference_work)
    return {"sequences": len(a), arm: round(float(a.mean()), 3), reference: round(float(b.mean()), 3),
            **difference(a - b)}


def pooled(works: list[Path], arm: str, reference: str, K: int, start: int,
           reference_work: Path | None = None) -> dict:
    """Every work dir's per-sequence differences together (each run's sequences are its own units: runs of
    other seeds play other sequences), with one bootstrap CI over all of them."""
    diffs = np.concatenate([np.subtract(*matched(work, arm, reference, K, start, reference_work)) for work in works])
    return {"runs": len(works), "sequences": len(diffs), **difference(diffs)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Prints the JSON to stdout; the committed ones are under benchmarks/results/ "
                                            "(e.g. r2_smollm2/curriculum/controls/paired_*.json).")
    parser.add_argument("work", nargs="+", help="transfer_experiment --work-dir folders")
    parser.add_argument("--arm", default="skillrise", help="the policy (an arm or 'untrained'/'init')")
    parser.add_argument("--reference", default="latest-rule-only", help="the row it is compared with")
    parser.add_argument("--reference-work", default=None,
                        help="the work dir holding the reference row (default: each WORK itself)")
    parser.add_argument("--K", type=int, default=6, help="the evaluated sequence length")
    parser.add_argument("--from-position", type=int, default=2, help="the first position counted (0-based)")
    args = parser.parse_args(argv)
    if not 0 <= args.from_position < args.K:
        parser.error(f"--from-position must be in 0..{args.K - 1}")
    reference_work = Path(args.reference_work) if args.reference_work else None
    seen: dict[Path, str] = {}
    for work in args.work:  # one run named twice (W and W/, a link) would count its sequences twice when pooled
        same = seen.setdefault(Path(work).resolve(), work)
        if same != work:
            parser.error(f"{same} and {work} name the same work dir; give each run once")
    for work in args.work:
        for folder, name in ((Path(work), args.arm), (reference_work or Path(work), args.reference)):
            if not results_path(folder, name).is_file():
                parser.error(f"{folder} holds no held-out results for {name!r} ({results_path(folder, name)})")
    try:
        runs = {work: paired(Path(work), args.arm, args.reference, args.K, args.from_position, reference_work)
                for work in args.work}
        together = ({"pooled": pooled([Path(w) for w in args.work], args.arm, args.reference, args.K,
                                      args.from_position, reference_work)} if len(args.work) > 1 else {})
    except ValueError as exc:
        parser.error(str(exc))
    print(json.dumps({"what": __doc__.split("\n\n")[0].replace("\n", " "), "K": args.K,
                      "from_position": args.from_position,
                      **({"reference_work": args.reference_work} if reference_work else {}), "runs": runs,
                      **together}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
