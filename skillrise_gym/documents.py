"""What carried documents hold: whether a curate turn's document states the facts its trial has revealed so
far, and whether it keeps instance details (for the transfer probe, `Backend.facts` gives each task's rule,
kind and bin colour, and `Backend.instance_words` its brand and object).

A document *states* a fact when one of its clauses (cut at ; . ! ? and newlines) holds every word of the fact
("glass items go in the blue bin" states ("glass", "blue")). Measured from `Turn` records alone (the bench's and
the trainer's), so a training run and an evaluation report the same numbers:

- ``states_all``: curate turns whose document states every distinct fact revealed at positions 0..p of the
  trial (p the task just finished): what a curator that keeps and merges carries;
- ``states_latest``: curate turns whose document states the fact of task p (what the last task revealed);
- ``keeps_earlier`` (with ``keeping_turns``, how many): of the curate turns whose trial revealed, before task
  p, a fact that task p did not reveal again, the share whose document states every such earlier fact.
  Keeping alone, apart from adding: a curator that carries only the latest revelation scores 0, one that
  keeps everything 1 (``states_all`` mixes in position 0 and trials that repeat one kind, where carrying
  the latest is enough). Absent when no curate turn had an earlier fact to keep;
- ``instance_words``: curate turns whose document holds a word that names an instance of tasks 0..p;
- ``reads_own_rule`` (with ``reading_turns``, how many): SOLVE turns whose document (the trial's previous
  curate turn's) states the task's own fact and also a revealed fact with another answer (two rules naming
  different bins): the share solved. It measures the solver's reading, not the curator's keeping: 1.0 reads
  the rule about the item; a solver that always follows one clause (the last, the first) is near 0.5.
  Absent when no solve turn had such a document.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Callable, Iterable, Mapping

from skillrise_gym.tasks import Task

_CLAUSE = re.compile(r"[;.!?\n]+")
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> set[str]:
    """The lower-case words of `text` (runs of letters and digits)."""
    return set(_WORD.findall(text.lower()))


def clauses(document: str) -> list[str]:
    """The clauses of a document: cut at ; . ! ? and newlines, empty ones dropped."""
    return [clause for clause in _CLAUSE.split(document) if clause.strip()]


def repeats_a_clause(document: str) -> bool:
    """Whether `document` states one clause twice (case and spacing aside): the regrowth of a document that
    repeats a clause until the token budget cuts it."""
    seen = [" ".join(clause.lower().split()) for clause in clauses(document)]
    return len(set(seen)) < len(seen)


def states(document: str, fact: Iterable[str]) -> bool:
    """Whether one clause of `document` holds every word of `fact`."""
    wanted = {w.lower() for w in fact}
    return any(wanted <= words(clause) for clause in clauses(document))


def document_stats(turns: Iterable[Any], task_of: Callable[[str], Task | None],
                   backend_of: Callable[[str], Any]) -> dict[str, float]:
    """The shares above over the curate turns of `turns` (`Turn`s or their dicts) whose tasks have facts;
    {} when none has (the benchmark does not say what its tasks reveal). `task_of(task_id)` gives a task,
    `backend_of(benchmark)` its backend class."""
    rows = [t if isinstance(t, Mapping) else t.to_dict() for t in turns]
    by_trial: dict[str, dict[int, str]] = defaultdict(dict)  # trial -> position -> task id
    curated_at: dict[tuple[str, int], str] = {}  # (trial, position) -> the document its curate turn wrote
    for row in rows:
        by_trial[row["trial_id"]][int(row["position"])] = row["task_id"]
        if row["role"] == "curate":
            curated_at[(row["trial_id"], int(row["position"]))] = str(row.get("action") or "")
    reading = [0, 0]  # solve turns whose document holds their own rule and another naming a different answer; solved
    for row in rows:
        document = curated_at.get((row["trial_id"], int(row["position"]) - 1))
        task = task_of(row["task_id"]) if row["role"] == "solve" and document else None
        if task is None:
            continue
        backend = backend_of(task.benchmark)
        own = backend.facts(task)
        played = by_trial[row["trial_id"]]
        earlier = [t for p in sorted(played) if p < int(row["position"]) and (t := task_of(played[p])) is not None]
        others = {f for t in earlier for f in backend.facts(t) if all(f[-1] != o[-1] for o in own)}
        if own and all(states(document, f) for f in own) and any(states(document, f) for f in others):
            reading[0] += 1
            reading[1] += bool(row.get("success"))
    counts = {"states_all": 0, "states_latest": 0, "instance_words": 0}
    curated = 0
    keeping = [0, 0]  # curate turns with an earlier fact the latest task did not reveal again; keeping them all
    for row in rows:
        if row["role"] != "curate":
            continue
        played = by_trial[row["trial_id"]]
        tasks = [task_of(played[p]) for p in sorted(played) if p <= int(row["position"])]
        tasks = [t for t in tasks if t is not None]
        if not tasks:
            continue
        backend = backend_of(tasks[-1].benchmark)
        facts = list(dict.fromkeys(f for t in tasks for f in backend.facts(t)))
        if not facts:
            continue
        document = str(row.get("action") or "")
        latest = backend.facts(tasks[-1])
        curated += 1
        counts["states_all"] += all(states(document, f) for f in facts)
        counts["states_latest"] += bool(latest) and all(states(document, f) for f in latest)
        earlier = [f for f in facts if f not in latest]
        if earlier:
            keeping[0] += 1
            keeping[1] += all(states(document, f) for f in earlier)
        instance = {w.lower() for t in tasks for w in backend.instance_words(t)}
        counts["instance_words"] += bool(instance & words(document))
    if not curated:
        return {}
    read = {"reads_own_rule": reading[1] / reading[0], "reading_turns": float(reading[0])} if reading[0] else {}
    keep = {"keeps_earlier": keeping[1] / keeping[0], "keeping_turns": float(keeping[0])} if keeping[0] else {}
    return {name: n / curated for name, n in counts.items()} | {"curate_turns": float(curated)} | keep | read
