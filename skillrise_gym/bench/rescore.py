"""`skillrise-bench rescore RUN`: a run's results and summary recomputed from its turns.jsonl alone.

Every finished sequence's per-task outcome (success, score, steps, engine error), its call and token counts
are rebuilt from its `records.Turn`s, compared with the runner's own results.jsonl line for that sequence,
and summarised with the same metrics (`metrics.summarize`). A recorded run can thus be re-scored, audited
or re-plotted without its engines; a disagreement between the two records is reported, never hidden.

What turns cannot carry: a task that failed to load has no turn (its position is rebuilt as a failure with
that reason), and wall time is not a turn's (it is taken from the result line when there is one).

Counts are compared too, so a lost record is a difference, never an "agree": a sequence with turns but no
result line (except the last sequence of turns.jsonl, a commit killed between its two writes, which the
store drops on resume), a result line with calls but no turns, and fewer result lines than the run's
summary.json says finished. A second result line for a sequence that contradicts its first is a difference too
(an identical one changes nothing). A damaged manifest or record line (not JSON, nested too deeply, not an
object, a field missing or of the wrong type: `store.check_result`, `store.check_turn`) raises `RunDirError`,
one line naming file:line; resuming reads the records by the same rules, so a run that resumes rescores.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping

from skillrise_gym.bench import metrics
# check_turn: the rule turn lines are read by, here and when a run resumes (it lives in the store)
from skillrise_gym.bench.store import RunDirError, check_result, check_turn, read_manifest, read_records
from skillrise_gym.records import Turn

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
            **metrics.cost_fields(seq),
            "agent_s": round(sum(float(t.extra.get("latency_s", 0.0)) for t in seq), 4),
            "wall_s": float(known.get("wall_s", 0.0)),
        })
    return out


ADVICE = "the file was modified or corrupted; restore it to rescore this run"


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _load(run: Path) -> tuple[dict[str, Any], list[tuple[int, Turn]], dict[tuple[int, int], dict[str, Any]],
                             list[dict[str, Any]]]:
    """The run's manifest, its turns (with line numbers), its result lines by (K, index) (the first of a
    duplicate, as the store keeps it) and the differences of the duplicates that contradict it; a damaged file
    raises RunDirError naming file:line."""
    manifest_path = run / "manifest.json"
    if not manifest_path.exists():
        raise FileNotFoundError(f"{run} is not a skillrise-bench run directory (no manifest.json)")
    manifest = read_manifest(manifest_path, ADVICE)
    identity = manifest.get("identity", {})
    if identity.get("mode", "cross") not in ("cross", "repeat") or not _integer(identity.get("seed", 0)):
        raise RunDirError(f"{manifest_path}: identity has mode {identity.get('mode')!r} and seed "
                          f"{identity.get('seed')!r}; {ADVICE}")
    turns = []
    if (run / "turns.jsonl").exists():
        for number, data in read_records(run / "turns.jsonl", check_turn, ADVICE)[0]:
            try:
                turns.append((number, Turn.from_dict(data)))
            except (TypeError, ValueError) as exc:
                raise RunDirError(f"{run / 'turns.jsonl'}:{number} is not a valid record ({exc}); {ADVICE}") from None
    results: dict[tuple[int, int], dict[str, Any]] = {}
    first: dict[tuple[int, int], int] = {}
    duplicates: list[dict[str, Any]] = []
    if (run / "results.jsonl").exists():
        for number, line in read_records(run / "results.jsonl", check_result, ADVICE)[0]:
            key = (line["K"], line["index"])
            if key not in results:
                results[key], first[key] = line, number
            elif line != results[key]:  # the same line twice changes nothing; another outcome is a difference
                fields = sorted(name for name in set(line) | set(results[key])
                                if line.get(name) != results[key].get(name))
                duplicates.append({"K": key[0], "index": key[1], "field": "duplicate result line",
                                   "results": f"line {first[key]}", "turns": None,
                                   "note": f"K={key[0]} index={key[1]}: results.jsonl line {number} is a duplicate "
                                           f"result line that contradicts line {first[key]} "
                                           f"({', '.join(fields)} differ)"})
    return manifest, turns, results, duplicates


def _summary_finished(run: Path) -> tuple[int, list[int], int] | None:
    """(finished, K, num_sequences) from the run's summary.json, None when it is absent or unreadable (it is
    an output, rewritten at the end of each session, not a record)."""
    try:
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        finished, Ks, n = summary["finished"], summary["K"], summary["num_sequences"]
    except (OSError, ValueError, RecursionError, KeyError, TypeError):
        return None
    if not (_integer(finished) and _integer(n) and isinstance(Ks, list) and all(_integer(k) for k in Ks)):
        return None
    return finished, Ks, n


def rescore_run(run: str | Path) -> dict[str, Any]:
    """Rebuild one run directory's results from its turns; returns the rescored summary and every difference
    from results.jsonl (``differences``: one entry per sequence and field that disagree, and one per lost
    record; an entry with a ``note`` says in words what is missing)."""
    run = Path(run).expanduser()
    manifest, numbered, committed, duplicates = _load(run)
    identity = manifest.get("identity", {})
    differences: list[dict[str, Any]] = list(duplicates)
    # turns of a sequence without its result line: the last sequence of the file is a commit killed between
    # its two writes (the store drops it on resume); any other lost its result line
    orphans: dict[tuple[int, int], int] = defaultdict(int)
    for _number, t in numbered:
        key = (int(t.extra["K"]), int(t.extra["index"]))
        if key not in committed:
            orphans[key] += 1
    if numbered:
        last = numbered[-1][1]
        last_key = (int(last.extra["K"]), int(last.extra["index"]))
        tail = 0
        for _number, t in reversed(numbered):
            if (int(t.extra["K"]), int(t.extra["index"])) != last_key:
                break
            tail += 1
        if last_key in orphans and orphans[last_key] == tail:
            del orphans[last_key]  # killed mid-commit: not a finished sequence
    for (K, index), count in sorted(orphans.items()):
        differences.append({"K": K, "index": index, "field": "result line", "results": "missing",
                            "turns": f"{count} turn(s)",
                            "note": f"K={K} index={index}: {count} turn(s) in turns.jsonl but no line in results.jsonl"})
    turns = [t for _number, t in numbered if (int(t.extra["K"]), int(t.extra["index"])) in committed]
    rebuilt = results_from_turns(turns, committed)
    seen = set()
    for result in rebuilt:
        key = (result["K"], result["index"])
        seen.add(key)
        for name in COMPARED:
            if name in committed[key] and committed[key][name] != result[name]:
                differences.append({"K": key[0], "index": key[1], "field": name, "results": committed[key][name],
                                    "turns": result[name]})
    for key in sorted(set(committed) - seen):  # no turn at all: right only when every task failed to load
        line = dict(committed[key])
        if any(line["success"]) or line["calls"]:
            differences.append({"K": key[0], "index": key[1], "field": "turns",
                                "results": f"{line['calls']} call(s)", "turns": "none recorded",
                                "note": f"K={key[0]} index={key[1]}: results.jsonl records {line['calls']} call(s) "
                                        "but turns.jsonl has none"})
        rebuilt.append({**line, "engine_errors": [e or NO_TURNS for e in line["engine_errors"]]})
    expected = _summary_finished(run)
    if expected is not None:
        finished, Ks_asked, n = expected
        held = sum(1 for K, i in committed if K in Ks_asked and i < n)
        if held < finished:
            differences.append({"K": None, "index": None, "field": "sequences", "results": held, "turns": None,
                                "note": f"summary.json says {finished} sequence(s) finished, results.jsonl holds "
                                        f"{held} of them (result lines lost)"})
    Ks = sorted({K for K, _ in committed})
    summary = metrics.summarize(rebuilt, Ks, identity.get("mode", "cross"), seed=int(identity.get("seed", 0)))
    summary.update(source="turns.jsonl", run=str(run), sequences=len(rebuilt), results_lines=len(committed),
                   differences=differences)
    return summary


def rescore(run: str | Path) -> dict[str, dict[str, Any]]:
    """`rescore_run` for a single-mode run, or for each carry mode of a several-modes run (by mode)."""
    from skillrise_gym.bench.store import CARRY_MANIFEST, carry_dir_name

    run = Path(run).expanduser()
    if (run / CARRY_MANIFEST).exists():
        read_manifest(run / CARRY_MANIFEST, ADVICE)
        modes = sorted(p.name[len(carry_dir_name("")):] for p in run.glob(carry_dir_name("*")) if p.is_dir())
        if not modes:
            raise RunDirError(f"{run} holds {CARRY_MANIFEST} but no {carry_dir_name('<mode>')}/ run; nothing to rescore")
        return {mode: rescore_run(run / carry_dir_name(mode)) for mode in modes}
    manifest = run / "manifest.json"
    carry = "skill"
    if manifest.exists():
        data = read_manifest(manifest, ADVICE)
        carry = data.get("identity", {}).get("carry", data.get("carry", "skill"))
        if not isinstance(carry, str):
            raise RunDirError(f"{manifest}: carry is {carry!r}, not a mode name; {ADVICE}")
    return {carry: rescore_run(run)}
