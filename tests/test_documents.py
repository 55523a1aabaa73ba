"""What carried documents hold (skillrise_gym/documents.py), measured from turn records."""

from __future__ import annotations

from skillrise_gym.backends.rulebook import RulebookBackend
from skillrise_gym.documents import document_stats, states
from skillrise_gym.tasks import Task


def _task(n: int, kind: str, colour: str, brand: str = "Acme", obj: str = "jar") -> Task:
    return Task(benchmark="rulebook", id=f"f-t{n}", family="f", difficulty=0.0, split="train",
                payload={"kind": kind, "bin": colour, "bins": ["red", "blue"], "object": obj, "brand": brand,
                         "item": f"a {brand} {obj}", "distractors": []})


def _turn(trial: str, role: str, position: int, task: Task, action: str = "", success: bool = False) -> dict:
    return {"trial_id": trial, "role": role, "position": position, "task_id": task.id, "action": action,
            "success": success}


def test_a_document_states_a_fact_when_one_clause_holds_all_its_words():
    assert states("and glass items go in the blue bin; paper: red", ("glass", "blue"))
    assert states("and glass items go in the blue bin; paper: red", ("paper", "red"))
    assert not states("glass items go in the red bin; paper goes in the blue bin", ("glass", "blue"))
    assert not states("blue bin", ("glass", "blue"))


def test_document_stats_separate_keeping_every_rule_from_carrying_the_latest():
    glass, paper, glass2 = _task(0, "glass", "blue"), _task(1, "paper", "red"), _task(2, "glass", "blue", "Zumi", "cup")
    tasks = {t.id: t for t in (glass, paper, glass2)}
    keeper = [_turn("a", "solve", 0, glass), _turn("a", "curate", 0, glass, "glass items go in the blue bin"),
              _turn("a", "solve", 1, paper), _turn("a", "curate", 1, paper, "glass -> blue bin; paper -> red bin"),
              _turn("a", "solve", 2, glass2), _turn("a", "curate", 2, glass2, "glass: blue; paper: red")]
    latest = [_turn("b", "solve", 0, glass), _turn("b", "curate", 0, glass, "the Acme jar is glass, blue bin"),
              _turn("b", "solve", 1, paper), _turn("b", "curate", 1, paper, "paper items go in the red bin")]
    both = document_stats(keeper + latest, tasks.get, lambda name: RulebookBackend)
    assert both["curate_turns"] == 5
    assert both["states_all"] == 4 / 5  # every keeper turn; the latest-only one at position 0 (one rule so far)
    assert both["states_latest"] == 5 / 5
    assert both["instance_words"] == 1 / 5  # "Acme jar"
    # keeping alone: the curate turns with an earlier rule the latest task did not reveal again (keeper at
    # positions 1 and 2, the latest-only curator at 1); only the keeper keeps it
    assert both["keeping_turns"] == 3 and both["keeps_earlier"] == 2 / 3
    assert document_stats(latest, tasks.get, lambda name: RulebookBackend)["keeps_earlier"] == 0.0
    assert "keeps_earlier" not in document_stats(keeper[:2], tasks.get, lambda name: RulebookBackend)
    # benchmarks that do not say what their tasks reveal: nothing measured
    assert document_stats(keeper, tasks.get, lambda name: type("B", (), {"facts": staticmethod(lambda t: [])})) == {}


def test_reads_own_rule_scores_solve_turns_whose_document_holds_two_rules_naming_different_bins():
    glass, paper, glass2, paper2 = (_task(0, "glass", "blue"), _task(1, "paper", "red"),
                                    _task(2, "glass", "blue", "Zumi", "cup"), _task(3, "paper", "red", "Zumi", "box"))
    tasks = {t.id: t for t in (glass, paper, glass2, paper2)}
    both = "glass items go in the blue bin; paper items go in the red bin"
    rows = [_turn("a", "solve", 0, glass), _turn("a", "curate", 0, glass, "glass items go in the blue bin"),
            _turn("a", "solve", 1, paper, success=True),  # one rule in its document: not a reading turn
            _turn("a", "curate", 1, paper, both),
            _turn("a", "solve", 2, glass2, success=True),  # read the glass rule
            _turn("a", "curate", 2, glass2, both),
            _turn("a", "solve", 3, paper2, success=False),  # followed the wrong clause
            _turn("a", "curate", 3, paper2, both)]
    stats = document_stats(rows, tasks.get, lambda name: RulebookBackend)
    assert stats["reading_turns"] == 2 and stats["reads_own_rule"] == 0.5
    # a document holding only the item's own rule, or rules naming the same bin, does not test reading
    same = _task(4, "paper", "blue")
    rows = [_turn("b", "solve", 0, glass), _turn("b", "curate", 0, glass, "paper items go in the blue bin; x"),
            _turn("b", "solve", 1, same, success=True), _turn("b", "curate", 1, same, "done")]
    assert "reads_own_rule" not in document_stats(rows, {**tasks, same.id: same}.get, lambda name: RulebookBackend)
