"""The format warm start's examples (skillrise_train/warmstart.py): well-formed targets that never depend on
a task's answer. Runs on the transfer probe's real engine; no model is needed."""

from __future__ import annotations

import re

import numpy as np

from skillrise_gym.env import SequenceEnv
from skillrise_train.warmstart import format_examples, named_action, reading_examples, trajectory_clauses

OPTIONS = {"rules": 1, "bins": 3}


def probe(K: int = 2) -> SequenceEnv:
    return SequenceEnv(backend="rulebook", K=K, split="train", max_task_steps=1, backend_options=OPTIONS,
                       prompt_style="compact")


def test_every_target_is_well_formed_and_solve_targets_are_admissible():
    env = probe()
    try:
        examples = format_examples(env, 40, seed=0)
    finally:
        env.close()
    assert len(examples) == 40 * (3 + 2)  # solve, curate, solve + two reading examples per sequence
    for ex in examples:
        if ex.prefix == "<action>":
            body = re.fullmatch(r"<action>(.*)</action>", ex.target).group(1)
            actions = re.search(r"Actions: (.*)", ex.prompt).group(1).split(" | ")
            assert body in actions
        else:
            assert re.fullmatch(r"<skill>[^<>]+</skill>", ex.target)


def test_reading_targets_follow_the_note_and_not_the_answer():
    env = probe()
    rng = np.random.default_rng(0)
    clauses = ["and glass items go in the red bin", "and wax items go in the green bin", "blue bin",
               "Wrong bin", "the Acme jar is glass"]
    agree = total = 0
    try:
        for seed in range(60):
            _, info = env.reset(seed=seed)
            answer = env.unwrapped.backend.expert_action()
            for ex in reading_examples(env, info["task_ids"], clauses, 2, rng):
                note = re.search(r"Skills: (.*)", ex.prompt).group(1)
                actions = re.search(r"Actions: (.*)", ex.prompt).group(1).split(" | ")
                target = re.fullmatch(r"<action>(.*)</action>", ex.target).group(1)
                context = re.search(r"Task: (.*)", ex.prompt).group(1) + " " + re.search(r"Now: (.*)", ex.prompt).group(1)
                assert target == named_action(actions, note, context) is not None
                agree += target == answer
                total += 1
    finally:
        env.close()
    assert total == 120
    assert agree / total < 0.5  # about 1/3: the note's bin is unrelated to the task's (three bins)


def test_a_document_of_several_rules_is_read_by_the_clause_about_the_task():
    actions = ["red bin", "blue bin", "green bin"]
    doc = "and glass items go in the red bin; and wax items go in the green bin"
    assert named_action(actions, doc, "sort a small Acme jar made of wax into the right bin.") == "green bin"
    assert named_action(actions, doc, "sort a small Acme jar made of glass into the right bin.") == "red bin"
    assert named_action(actions, doc, "sort a small Acme jar made of cork into the right bin.") is None  # no rule about it
    assert named_action(actions, doc) is None  # nothing to tell the clauses apart
    # clauses naming the same action agree whatever the task
    assert named_action(actions, "glass goes in the red bin; wax goes in the red bin", "made of cork") == "red bin"


def test_a_curate_target_keeps_the_previous_document_and_adds_one_clause():
    from skillrise_train.warmstart import DOCUMENT_CLAUSES, curated_document

    rng = np.random.default_rng(0)
    assert curated_document("", ["the jar is glass"], rng) == "the jar is glass"
    assert curated_document("none", [], rng) == "none"
    doc = curated_document("and glass items go in the red bin", ["and wax items go in the green bin"], rng)
    assert doc == "and glass items go in the red bin; and wax items go in the green bin"
    assert curated_document(doc, ["and glass items go in the red bin"], rng) == (
        "and wax items go in the green bin; and glass items go in the red bin")  # moved last, not repeated
    long = "; ".join(f"clause {n}" for n in range(DOCUMENT_CLAUSES))
    assert curated_document(long, ["new"], rng).split("; ") == [f"clause {n}" for n in range(1, DOCUMENT_CLAUSES)] + ["new"]


def test_reading_notes_of_several_rules_teach_finding_the_one_about_the_item():
    env = SequenceEnv(backend="rulebook", K=2, split="train", max_task_steps=1, backend_options={"rules": 2, "bins": 4},
                      prompt_style="compact")
    rng = np.random.default_rng(1)
    clauses = [f"and {kind} items go in the {colour} bin" for kind in ("glass", "wax", "paper", "metal", "cork",
                                                                        "stone", "wood", "cloth", "rubber", "leather")
               for colour in ("red", "blue")]
    several = 0
    try:
        for seed in range(40):
            _, info = env.reset(seed=seed)
            kind = env.unwrapped.backend._payload()["kind"]
            for ex in reading_examples(env, info["task_ids"], clauses, 2, rng):
                note = re.search(r"Skills: (.*)", ex.prompt).group(1)
                target = re.fullmatch(r"<action>(.*)</action>", ex.target).group(1)
                assert ex.several == (";" in note)  # the check's follow_several counts these notes
                if ";" in note:
                    several += 1
                    about = [c for c in note.split("; ") if f" {kind} " in f" {c} "]
                    assert len(about) == 1 and about[0].endswith(target)
    finally:
        env.close()
    assert several >= 20


def test_named_action_ignores_shared_words_and_ties():
    actions = ["red bin", "blue bin", "green bin"]
    assert named_action(actions, "glass goes in the blue bin") == "blue bin"
    assert named_action(actions, "every bin is fine") is None  # 'bin' is in every action
    assert named_action(actions, "red or blue") is None  # a tie names nothing
    assert trajectory_clauses([]) == []


def _scripted(copy: bool, follow: bool):
    """An answerer for check_format: curate turns copy a clause of the trajectory shown (or write one
    of their own); solve turns take the action their note names (or always the first one)."""
    def answer(prompts, prefixes, seeds=None):
        out = []
        for prompt in prompts:
            if "Did:" in prompt:  # a curate prompt: the trajectory follows "Did:"
                shown = prompt.split("Did:", 1)[1].split("->", 1)[1].split("\n")[0]
                clause = trajectory_clauses([type("S", (), {"action": "", "observation": shown})()])[-1]
                out.append(f"<skill>{clause if copy else 'sort things well'}</skill>")
            else:
                note = re.search(r"Skills: (.*)", prompt).group(1)
                actions = re.search(r"Actions: (.*)", prompt).group(1).split(" | ")
                context = re.search(r"Task: (.*)", prompt).group(1) + " " + re.search(r"Now: (.*)", prompt).group(1)
                named = named_action(actions, note, context)
                out.append(f"<action>{named if follow and named else actions[0]}</action>")
        return out
    return answer


def test_the_format_check_measures_copying_and_following():
    from skillrise_train.warmstart import check_format

    env = probe()
    try:
        good = check_format(env, _scripted(copy=True, follow=True), sequences=20)
        careless = check_format(env, _scripted(copy=False, follow=False), sequences=20)
    finally:
        env.close()
    assert good.copy == 1.0 and good.follow == 1.0 and good.valid == 1.0
    assert careless.copy == 0.0 and careless.valid == 1.0
    assert careless.follow < 0.6  # the first bin is the named one about a third of the time
    assert good.passes(0.9, 0.9) and not careless.passes(0.9, 0.9)
    assert good.follow_several is None  # one-clause notes: nothing of several rules to read


def test_the_format_check_measures_reading_several_rules_by_the_item():
    """documents="several": the check also reports how often a note of several rules is read by the clause
    about the item; a reader that takes the last naming clause is caught there, not in the overall share."""
    from skillrise_train.warmstart import check_format

    def last_clause(prompts, prefixes, seeds=None):
        out = []
        for prompt in prompts:
            if "Did:" in prompt:
                out.append("<skill>none</skill>")
                continue
            note = re.search(r"Skills: (.*)", prompt).group(1)
            actions = re.search(r"Actions: (.*)", prompt).group(1).split(" | ")
            named = [n for c in note.split(";") if (n := named_action(actions, c))]
            out.append(f"<action>{named[-1] if named else actions[0]}</action>")
        return out

    env = SequenceEnv(backend="rulebook", K=2, split="train", max_task_steps=1, backend_options={"rules": 2, "bins": 4},
                      prompt_style="compact")
    try:
        good = check_format(env, _scripted(copy=True, follow=True), sequences=40, documents="several")
        last = check_format(env, last_clause, sequences=40, documents="several")
    finally:
        env.close()
    assert good.follow_several == 1.0
    assert last.follow_several is not None and last.follow_several < 0.8


def test_one_clause_documents_by_default_several_on_request():
    import pytest

    from skillrise_train.config import TrainConfig

    env = SequenceEnv(backend="rulebook", K=3, split="train", max_task_steps=1, backend_options={"rules": 2, "bins": 4},
                      prompt_style="compact")
    try:
        one = format_examples(env, 20, seed=0)
        several = format_examples(env, 20, seed=0, documents="several")
        with pytest.raises(ValueError, match="documents must be one of"):
            format_examples(env, 1, documents="many")
    finally:
        env.close()
    curated = lambda examples: [re.fullmatch(r"<skill>(.*)</skill>", ex.target).group(1) for ex in examples  # noqa: E731
                                if ex.target.startswith("<skill>")]
    assert all(";" not in doc for doc in curated(one))  # one trajectory clause each
    assert any(";" in doc for doc in curated(several))  # the previous document kept, a clause added
    with pytest.raises(ValueError, match="warmstart_documents must be one or several"):
        TrainConfig(warmstart_documents="many")
