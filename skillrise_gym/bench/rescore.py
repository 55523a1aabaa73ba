"""`skillrise-bench rescore RUN`: a run's results and summary recomputed from its turns.jsonl alone.

Every finished sequence's per-task outcome (success, score, steps, engine error), its call and token counts
are rebuilt from its `records.Turn`s, compared with the runner's own results.jsonl line for that sequence,
and summarised with the same metrics (`metrics.summarize`). A recorded run can thus be re-scored, audited
or re-plotted without its engines; a disagreement between the two records is reported, never hidden.

What turns cannot carry: a task that failed to load has no turn (its position is rebuilt as a failure with
that reason), and wall time is not a turn's (it is taken from the result line when there is one).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping

from skillrise_gym.bench import metrics
from skillrise_gym.records import Turn, iter_jsonl

#: result fields rebuilt from turns and compared with results.jsonl
COMPARED = ("success", "score", "steps", "calls", "solve_calls", "curate_calls", "invalid_format",
            "invalid_format_solve", "prompt_tokens", "completion_tokens")
NO_TURNS = "no turns recorded at this position (the task failed to load)"


def results_from_turns(turns: Iterable[Turn], committed: Mapping[tuple[int, int], Mapping[str, Any]] | None = None
                       ) -> list[dict[str, Any]]:
    """One result record per sequence (K, index) of `turns`, in the runner's results.jsonl format."""
    by_sequence: dict[tuple[int, int], list[Turn]] = defaultdict(list)
    for turn in turns:
        by_sequence[(int(turn.extra["K"]), int(turn.extra["index"]))].append(turn)
    committed = committed or {}
    out = []
    for (K, index), seq in sorted(by_sequence.items()):
        solve = [t for t in seq if t.role == "solve"]
        at = {p: [t for t in solve if t.position == p] for p in range(K)}
        known = committed.get((K, index), {})
        task_ids = [at[p][0].task_id if at[p] else (known.get("task_ids") or [None] * K)[p] for p in range(K)]
        out.append({
            "K": K,
            "index": index,
            "sequence_id": seq[0].sequence_id,
            "trial_id": seq[0].trial_id,
            "family": seq[0].family,
            "mode": seq[0].extra.get("mode"),
            "carry": seq[0].extra.get("carry", "skill"),
            "task_ids": task_ids,
            "success": [bool(at[p] and at[p][-1].success) for p in range(K)],
            "score": [float(at[p][-1].score) if at[p] else 0.0 for p in range(K)],
            "steps": [len(at[p]) for p in range(K)],
            "engine_errors": [(at[p][-1].engine_error if at[p] else NO_TURNS) for p in range(K)],
            "calls": len(seq),
            "solve_calls": len(solve),
            "curate_calls": len(seq) - len(solve),
            "invalid_format": sum(not t.format_valid for t in seq),
            "invalid_format_solve": sum(not t.format_valid for t in solve),
            "prompt_tokens": sum(t.prompt_tokens for t in seq),
            "completion_tokens": sum(t.completion_tokens for t in seq),
            "agent_s": round(sum(float(t.extra.get("latency_s", 0.0)) for t in seq), 4),
            "wall_s": float(known.get("wall_s", 0.0)),
        })
    return out


def _load(run: Path) -> tuple[dict[str, Any], list[Turn], dict[tuple[int, int], dict[str, Any]]]:
    manifest_path = run / "manifest.json"
    if not manifest_path.exists():
        raise FileNotFoundError(f"{run} is not a skillrise-bench run directory (no manifest.json)")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    turns = [Turn.from_dict(d) for d in iter_jsonl(run / "turns.jsonl")] if (run / "turns.jsonl").exists() else []
    results = {}
    if (run / "results.jsonl").exists():
        for line in iter_jsonl(run / "results.jsonl"):
            results[(int(line["K"]), int(line["index"]))] = line
    return manifest, turns, results


def rescore_run(run: str | Path) -> dict[str, Any]:
    """Rebuild one run directory's results from its turns; returns the rescored summary and every difference
    from results.jsonl (``differences``: one entry per sequence and field that disagree)."""
    run = Path(run).expanduser()
    manifest, turns, committed = _load(run)
    # turns of a sequence without its result line were dropped by the store on open (a killed commit)
    turns = [t for t in turns if (int(t.extra["K"]), int(t.extra["index"])) in committed]
    rebuilt = results_from_turns(turns, committed)
    differences = []
    seen = set()
    for result in rebuilt:
        key = (result["K"], result["index"])
        seen.add(key)
        for name in COMPARED:
            if name in committed[key] and committed[key][name] != result[name]:
                differences.append({"K": key[0], "index": key[1], "field": name, "results": committed[key][name],
                                    "turns": result[name]})
    for key in sorted(set(committed) - seen):  # every task failed to load: no turn at all
        line = dict(committed[key])
        if any(line.get("success", [])):
            differences.append({"K": key[0], "index": key[1], "field": "turns", "results": "successes",
                                "turns": "none recorded"})
        rebuilt.append({**line, "engine_errors": [e or NO_TURNS for e in line.get("engine_errors", [])]})
    Ks = sorted({int(k) for k in manifest.get("K", [])} | {k for k, _ in committed})
    summary = metrics.summarize(rebuilt, Ks, manifest.get("mode", "cross"), seed=int(manifest.get("seed", 0)))
    summary.update(source="turns.jsonl", run=str(run), sequences=len(rebuilt), differences=differences)
    return summary


def rescore(run: str | Path) -> dict[str, dict[str, Any]]:
    """`rescore_run` for a single-mode run, or for each carry mode of a several-modes run (by mode)."""
    from skillrise_gym.bench.store import CARRY_MANIFEST, carry_dir_name

    run = Path(run).expanduser()
    if (run / CARRY_MANIFEST).exists():
        modes = sorted(p.name[len(carry_dir_name("")):] for p in run.glob(carry_dir_name("*")) if p.is_dir())
        return {mode: rescore_run(run / carry_dir_name(mode)) for mode in modes}
    manifest = run / "manifest.json"
    carry = json.loads(manifest.read_text()).get("carry", "skill") if manifest.exists() else "skill"
    return {carry: rescore_run(run)}
