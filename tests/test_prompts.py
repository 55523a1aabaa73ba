"""Prompt rendering and output parsing edge cases."""

import pytest

from skillrise_gym import prompts
from skillrise_gym.backends.base import ActionGrammar
from skillrise_gym.prompts import EMPTY_SKILL_PLACEHOLDER, Step, parse_action, parse_skill


@pytest.mark.parametrize(
    "text, action, valid",
    [
        ("<action>go to fridge 1</action>", "go to fridge 1", True),
        ("Reasoning...\n<action> Go To Fridge 1 </action>", "go to fridge 1", True),  # alfworld lower-cases
        ("<ACTION>open drawer 2</ACTION>", "open drawer 2", True),
        ("<action>a</action> then <action>b</action>", "a", True),  # first block wins
        ("no tags at all: look", "no tags at all: look", False),
        ("<action>unclosed", "unclosed", False),
        ("<action>go north\nmore text", "go north", False),  # an answer cut by its token budget
        ("</action>reversed<action>", "", False),  # nothing after the last opening tag
        ("<action></action>", "", False),
        ("<action>take\x00 apple\x07</action>", "take apple", True),
        ("<action>go to\n fridge 1</action>", "go to fridge 1", True),
        # nested pairs give the innermost command, never a tag, and are not well-formed
        ("<action><action>go north</action></action>", "go north", False),
        ("<action>a <action>go north</action>", "go north", False),
        ("<action>go north</action></action>", "go north", False),
        ("<action><action>go north", "go north", False),  # unclosed: the rest after the last opening tag
        ("Go North", "go north", False),  # untagged text is the command too, lower-cased like a tagged one
    ],
)
def test_parse_action(text, action, valid):
    parsed = parse_action(text, "alfworld")
    assert (parsed.action, parsed.valid) == (action, valid)


def test_scienceworld_actions_keep_case():
    assert parse_action("<action>focus on Red Wire</action>", "scienceworld").action == "focus on Red Wire"


@pytest.mark.parametrize(
    "text, document, valid",
    [
        ("think\n<skill>\n## Workflow\n1. look\n</skill>", "## Workflow\n1. look", True),
        ("<skill>old</skill> revised: <skill>new</skill>", "new", True),  # last block wins
        ("just a document", "just a document", False),
        ("<skill>unclosed", "<skill>unclosed", False),
        ("<skill></skill>", "", True),
        ("<skill>" + "y" * 5000 + "</skill>", "y" * 4000, True),
        ("<skill>a<skill>b</skill></skill>", "b", False),  # nested: the inside, never a tag, not well-formed
        ("<skill>a</skill></skill>", "a", False),
    ],
)
def test_parse_skill(text, document, valid):
    parsed = parse_skill(text)
    assert (parsed.document, parsed.valid) == (document, valid)


def test_parse_reflection_follows_the_same_rule():
    assert prompts.parse_reflection("<remark>x</remark>") == prompts.ParsedSkill("x", True)
    assert prompts.parse_reflection("<remark><remark>x</remark></remark>") == prompts.ParsedSkill("x", False)
    assert prompts.parse_reflection("no tags") == prompts.ParsedSkill("no tags", False)


def test_answer_writers_round_trip_through_the_parsers():
    assert parse_action(prompts.action_answer("take mug 1")) == prompts.ParsedAction("take mug 1", True)
    assert parse_skill(prompts.skill_answer("rule one")) == prompts.ParsedSkill("rule one", True)
    assert prompts.parse_reflection(prompts.reflection_answer("r")) == prompts.ParsedSkill("r", True)
    assert prompts.answer_prefix("solve", "compact") + "x</action>" == prompts.action_answer("x")


def test_parsers_reject_non_strings():
    with pytest.raises(TypeError):
        parse_action(None)
    with pytest.raises(TypeError):
        parse_skill(b"<skill>x</skill>")


def test_solve_prompt_has_every_part():
    text = prompts.solve_prompt(
        "alfworld", skill_document="", task="put a mug in the sink.", observation="You see a mug 1.",
        history=[Step("go to sink 1", "You arrive at sink 1.")], admissible_actions=["look", "take mug 1"],
    )
    for part in (EMPTY_SKILL_PLACEHOLDER, "put a mug in the sink.", "You see a mug 1.", "go to sink 1",
                 "You arrive at sink 1.", "- take mug 1", "<action>"):
        assert part in text


def test_solve_prompt_history_window_and_action_grammar():
    history = [Step(f"a{i}", f"o{i}") for i in range(30)]
    grammar = ActionGrammar(templates=("search[<your query>]", "click[<button, product id or option>]"))
    text = prompts.solve_prompt("webshop", skill_document="doc", task="t", observation="o",
                                history=history, admissible_actions=None, action_grammar=grammar)
    assert "last 5 of 30" in text and "[Step 30] Action: a29" in text and "a24" not in text
    assert "\nActions: search[<query>] on the search page; click[<button, product id or option>]" in text
    assert "doc" in text
    # an admissible list, when there is one, is shown instead of the grammar
    listed = prompts.solve_prompt("webshop", skill_document="doc", task="t", observation="o",
                                  admissible_actions=["click[buy now]"], action_grammar=grammar)
    assert "- click[buy now]" in listed and "on the search page" not in listed


def test_action_grammar_wording_lives_in_the_profiles():
    """Backends give templates and objects as data; the words are the prompts' (the reference's wording for
    ScienceWorld, byte for byte as it was when backends wrote it)."""
    grammar = ActionGrammar(templates=("open OBJ", "look around"), objects=("door", "agent"))
    assert prompts.render_action_grammar("scienceworld", grammar) == (
        "Valid_actions: open OBJ, look around, OBJ needs to be replaced with one of the following objects: "
        "door, agent\nexample: focus on door")
    assert prompts.render_action_grammar("webshop", grammar) == (
        "Actions: search[<query>] on the search page; click[<button, product id or option>] for an item listed "
        "on the page, e.g. click[buy now].")
    assert prompts.render_action_grammar("toy", grammar) == "Actions: open OBJ, look around; objects: door, agent"
    assert prompts.render_action_grammar("toy", ActionGrammar(templates=("any word",))) == "Actions: any word"
    assert prompts.render_action_grammar("scienceworld", None) is None
    compact = prompts.solve_prompt("scienceworld", skill_document="", task="t", observation="o",
                                   action_grammar=grammar, style="compact")
    assert "Valid_actions: open OBJ, look around" in compact


def test_curate_prompt_includes_task_trajectory_and_outcome():
    text = prompts.curate_prompt("webshop", skill_document="keep this", task="buy red shoes under $30",
                                 history=[Step("search[red shoes]", "Results ...")], success=False)
    for part in ("keep this", "buy red shoes under $30", "search[red shoes]", "FAILURE", "<skill>", "price limit"):
        assert part in text


def test_huge_observations_are_cut_in_the_middle():
    text = prompts.solve_prompt("toy", skill_document="", task="t", observation="a" * 50_000 + "END")
    assert "characters cut" in text and text.count("a") < 10_000 and "END" in text


def test_unknown_benchmark_profile():
    with pytest.raises(ValueError, match="no prompt profile"):
        prompts.solve_prompt("nethack", skill_document="", task="t", observation="o")


def test_the_carry_mode_decides_how_the_carried_text_is_shown():
    """The env says which carry mode a document belongs to; its text does not."""
    experience = prompts.render_experience([prompts.Reflection(0, "fam", True, "look first")])
    reflect = prompts.solve_prompt("alfworld", skill_document=experience, task="t", observation="o", carry="reflect")
    assert prompts.EXPERIENCE_HEADING in reflect and "## Current Skill Document" not in reflect
    # a skill document that happens to start like the reflections' heading is still a skill document
    skill = prompts.solve_prompt("alfworld", skill_document=experience, task="t", observation="o")
    assert "## Current Skill Document" in skill and prompts.EXPERIENCE_HEADING in skill
    with pytest.raises(ValueError, match="unknown carry mode"):
        prompts.solve_prompt("alfworld", skill_document="", task="t", observation="o", carry="memory")


@pytest.mark.parametrize("style", prompts.STYLES)
def test_the_example_action_without_a_list_is_the_profiles(style, monkeypatch):
    import dataclasses

    monkeypatch.setitem(prompts.PROFILES, "toy", dataclasses.replace(prompts.PROFILES["toy"], action_example="wave"))
    text = prompts.solve_prompt("toy", skill_document="", task="t", observation="o", style=style)
    assert "<action>wave</action>" in text


def test_an_engine_task_that_says_your_task_is_to_is_not_said_twice():
    """ScienceWorld's descriptions begin "Your task is to ...": the full solve prompt's task line keeps one."""
    from skillrise_gym.prompts import solve_prompt

    for task in ("Your task is to boil water. First, focus on the substance.", "boil water. First, focus on the substance."):
        prompt = solve_prompt("scienceworld", skill_document="", task=task, observation="You are in the kitchen.",
                              history=[], admissible_actions=["look around"], style="full")
        assert "Your task is to: boil water. First, focus on the substance." in prompt
        assert prompt.count("Your task is to") == 1
