"""Prompt templates and output parsing, in one place for the env, the bench agents and the trainer.

SOLVE prompt: role line, the current skill document, the task, the latest observation, the last few
steps of this task, the admissible actions (or the action grammar), and the instruction to reason and
answer inside ``<action>...</action>``.

CURATE prompt: the old skill document, the task statement (the reference omits it; we include it so the
curator need not guess the goal from observations), the whole trajectory of the finished task and its
outcome, and the rules for rewriting the document; the answer goes inside ``<skill>...</skill>``.

Parsing:
- `parse_action`: text between the first ``<action>`` and the next ``</action>``; without the tags the
  whole stripped text is the action and the output is flagged invalid (`valid=False`).
- `parse_skill`: text between the last ``<skill>`` and the last ``</skill>`` after it; without them the
  whole stripped text is the document, flagged invalid. The document is cut to `SKILL_CHAR_LIMIT`.
- Control characters (other than newline and tab) are removed from both; an empty document renders as
  `EMPTY_SKILL_PLACEHOLDER` in prompts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

SKILL_CHAR_LIMIT = 4000
EMPTY_SKILL_PLACEHOLDER = "(The skill document is empty: no skills have been distilled yet.)"
#: longest observation text shown in a prompt; longer ones are cut in the middle with a marker
OBSERVATION_CHAR_LIMIT = 8000

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True)
class Profile:
    """What differs between benchmarks in the prompts."""

    agent_role: str
    family_words: str
    abstraction_examples: str
    extra_curate_advice: str = ""
    history_window: int = 15
    lowercase_actions: bool = True


PROFILES: dict[str, Profile] = {
    "alfworld": Profile(
        agent_role="You are an expert agent acting in ALFRED, a text-based household environment.",
        family_words="household tasks of the same type",
        abstraction_examples='object names and numbered places ("soapbottle 1", "drawer 3") become "the target '
        'object", "a receptacle"',
    ),
    "webshop": Profile(
        agent_role="You are an expert shopping agent in WebShop, a text-based online store.",
        family_words="shopping tasks in the same product category",
        abstraction_examples='product names, brands, exact option values and price limits ("rose red", '
        '"1.6 ounce", "lower than 60.00 dollars") become "the required colour/size option", "the price limit"',
        extra_curate_advice=(
            "Where it helps, capture shopping procedure: how to write a search query that encodes the "
            "goal's constraints; which result to open (matching category and attributes, not merely the "
            "first one); choosing every required option (colour, size, count...) before buying; checking "
            "attributes and the price limit before click[buy now]; when to go back, read the description "
            "or features, or turn the page."
        ),
        history_window=5,
    ),
    "scienceworld": Profile(
        agent_role="You are an expert agent in ScienceWorld, a text-based simulation of elementary-school "
        "science experiments.",
        family_words="science tasks of the same kind",
        abstraction_examples='substance names, container colours, room names and thresholds become "the target '
        'substance", "the designated container"',
        history_window=10,
        lowercase_actions=False,
    ),
    "toy": Profile(
        agent_role="You are an agent in a small text game.",
        family_words="tasks of the same kind",
        abstraction_examples='specific names become "the target"',
        history_window=10,
    ),
}

SOLVE_TEMPLATE = """{agent_role}

## Current Skill Document
These skills were distilled from earlier {family_words}. Apply them only when you are confident they fit \
the current situation; ignore anything that does not.
{skill_document}

## Task
Your task is to: {task}

## Current Observation
{observation}
{history}
## Admissible Actions
{actions}

Now take one action for the current step. First reason step by step about the situation and which \
admissible action best advances the task; then give exactly one action inside <action></action> tags, \
for example <action>{example}</action>."""

CURATE_TEMPLATE = """You maintain a SKILL DOCUMENT for an agent that solves a series of related {family_words}. \
The agent has just attempted one task. Revise the document so that it helps the agent solve the LATER \
tasks of this family more reliably.

## Old Skill Document
{skill_document}

## The Task Just Attempted
{task}

## What Happened (the agent's actions and the observations that followed)
{trajectory}
Outcome: {outcome}

## Your Job
Rewrite the document, starting from the old one and refining it with what this attempt revealed. Rules:
- Abstract, do not memorise: remove instance details; for example {abstraction_examples}.
- Ground every statement in what actually happened; do not invent steps that were not observed.
- If the attempt failed, name the point of failure as a concrete pitfall.
- Be concise: no generic padding. If the attempt taught little, keep the old document almost unchanged.
- Distil a reusable procedure; do not copy the trajectory.
{extra_advice}
A useful structure (use the sections that fit): "## When to use", "## Workflow" (ordered general steps), \
"## Pitfalls".

Reason first, then output the FULL revised skill document inside <skill></skill> tags."""


@dataclass(frozen=True)
class Step:
    """One (action, observation) pair of a task's history."""

    action: str
    observation: str


@dataclass(frozen=True)
class ParsedAction:
    action: str
    valid: bool


@dataclass(frozen=True)
class ParsedSkill:
    document: str
    valid: bool


def profile(benchmark: str) -> Profile:
    try:
        return PROFILES[benchmark]
    except KeyError:
        raise ValueError(f"no prompt profile for benchmark {benchmark!r}; known: {', '.join(PROFILES)}") from None


def clean_text(text: str) -> str:
    """Remove control characters other than newline and tab (they confuse tokenizers and engines)."""
    return _CONTROL.sub("", text)


def clip_middle(text: str, limit: int = OBSERVATION_CHAR_LIMIT) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def render_skill(document: str) -> str:
    return document.strip() or EMPTY_SKILL_PLACEHOLDER


def render_history(history: Sequence[Step], window: int | None = None) -> str:
    shown = list(history)[-window:] if window else list(history)
    first = len(history) - len(shown) + 1
    lines = [
        f"[Step {first + i}] Action: {step.action}\nObservation: {clip_middle(step.observation, 2000)}"
        for i, step in enumerate(shown)
    ]
    return "\n".join(lines)


def solve_prompt(
    benchmark: str,
    *,
    skill_document: str,
    task: str,
    observation: str,
    history: Sequence[Step] = (),
    admissible_actions: Sequence[str] | None = None,
    action_help: str | None = None,
) -> str:
    prof = profile(benchmark)
    if history:
        shown = min(len(history), prof.history_window)
        history_text = (
            f"\n## Recent Steps (last {shown} of {len(history)})\n"
            f"{render_history(history, prof.history_window)}\n"
        )
    else:
        history_text = ""
    if admissible_actions:
        actions = "\n".join(f"- {a}" for a in admissible_actions)
        example = admissible_actions[0]
    else:
        actions = action_help or "(no list available: use the commands the environment understands)"
        example = "look around" if benchmark != "webshop" else "search[red shoes]"
    return SOLVE_TEMPLATE.format(
        agent_role=prof.agent_role,
        family_words=prof.family_words,
        skill_document=render_skill(skill_document),
        task=task.strip(),
        observation=clip_middle(observation.strip()),
        history=history_text,
        actions=actions,
        example=example,
    ).strip()


def curate_prompt(
    benchmark: str,
    *,
    skill_document: str,
    task: str,
    history: Sequence[Step],
    success: bool,
) -> str:
    prof = profile(benchmark)
    return CURATE_TEMPLATE.format(
        family_words=prof.family_words,
        skill_document=render_skill(skill_document),
        task=task.strip(),
        trajectory=(render_history(history) or "(no actions were taken)") + "\n",
        outcome="SUCCESS" if success else "FAILURE (the task was not completed)",
        abstraction_examples=prof.abstraction_examples,
        extra_advice=(prof.extra_curate_advice + "\n") if prof.extra_curate_advice else "",
    ).strip()


def _between(text: str, open_tag: str, close_tag: str, last: bool) -> str | None:
    lower = text.lower()
    start = lower.rfind(open_tag) if last else lower.find(open_tag)
    if start < 0:
        return None
    end = lower.rfind(close_tag) if last else lower.find(close_tag, start)
    if end < start + len(open_tag):
        return None
    return text[start + len(open_tag) : end]


def parse_action(text: str, benchmark: str = "alfworld") -> ParsedAction:
    """The command inside the first <action>...</action> (lower-cased where the benchmark is case-blind)."""
    if not isinstance(text, str):
        raise TypeError(f"model output must be a str, got {type(text).__name__}")
    inner = _between(text, "<action>", "</action>", last=False)
    action = clean_text(inner if inner is not None else text).strip()
    action = " ".join(action.split()) if "\n" in action else action
    if profile(benchmark).lowercase_actions:
        action = action.lower()
    return ParsedAction(action=action, valid=inner is not None and bool(action))


def parse_skill(text: str, limit: int = SKILL_CHAR_LIMIT) -> ParsedSkill:
    """The document inside the last <skill>...</skill>, cut to `limit` characters."""
    if not isinstance(text, str):
        raise TypeError(f"model output must be a str, got {type(text).__name__}")
    inner = _between(text, "<skill>", "</skill>", last=True)
    document = clean_text(inner if inner is not None else text).strip()[:limit].strip()
    return ParsedSkill(document=document, valid=inner is not None)
