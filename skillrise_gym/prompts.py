"""Prompt templates and output parsing, in one place for the env, the bench agents and the trainer.

SOLVE prompt: role line, the current skill document, the task, the latest observation, the last few
steps of this task, the admissible actions (or the action grammar), and the instruction to reason and
answer inside ``<action>...</action>``.

CURATE prompt: the old skill document, the task statement (the reference omits it; we include it so the
curator need not guess the goal from observations), the whole trajectory of the finished task and its
outcome, and the rules for rewriting the document; the answer goes inside ``<skill>...</skill>``.

Styles (`STYLES`): ``full`` asks the model to reason, then answer inside the tags (the reference's prompts,
for models of a billion parameters and more); ``compact`` shows the same parts in a few short lines and asks
for the tagged answer only (small models: with a 48-token budget a 135M model that reasons first never
reaches the tags). Backends pick their default (`Backend.prompt_style`); the env, the bench and the trainer
can override it.

Answer prefix (`answer_prefix`): compact prompts come with the opening tag of the answer, which agents that
can prefill the assistant's reply (the hf agent, the trainer, the openai agent with ``prefill="continue"``)
put after the chat template's assistant header; the answer is that prefix plus the model's completion.
`needs_prefill(style)` says whether a style has one: a model that cannot prefill starts a fresh reply
without the tag, so the bench refuses such agents on those prompts (`agents.base.check_prefill`). Scripted
agents write whole tagged answers. Full prompts have no prefix.

Carry modes: ``skill`` (the document above), ``none`` (an always-empty document, no curate turn) and
``reflect`` (the reference's LaMer-style baseline, spec section 2.7): after each task a REFLECT prompt asks
for one reflection inside ``<remark>...</remark>``; later solve prompts list every earlier reflection under
"Experience From Earlier Tasks" (`render_experience`).

Parsing (the one rule the env, the bench and the trainer share):
- `parse_action`: the command is the inside of the first ``<action>...</action>`` pair; an opening tag never
  closed (a completion cut by its token budget) gives the rest of its line; text without the tag is the
  command as a whole. Whatever the format, that command is what the env sends to the engine; the answer is
  well-formed (`valid`) only with a closed, non-nested pair around a non-empty command.
- `parse_skill`: the inside of the last closed ``<skill>...</skill>`` pair; without one the whole stripped text
  is the document, flagged invalid; a nested pair gives its inside, flagged invalid. The document is cut to
  `SKILL_CHAR_LIMIT`.
- `parse_reflection`: the same rule for ``<remark>...</remark>`` (the raw text is kept without the tags, as
  the reference); cut to `SKILL_CHAR_LIMIT`.
- Control characters (other than newline and tab) are removed from both; an empty document renders as
  `EMPTY_SKILL_PLACEHOLDER` in prompts.
- Writing answers: `action_answer`, `skill_answer`, `reflection_answer` (scripted agents, warm-start targets).

Roles (`ROLES`, `ROLE_SOLVE`, `ROLE_CURATE`) and tags are defined here and nowhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from skillrise_gym.backends.base import ActionGrammar

#: the two roles of a turn, by name (records, credit) and by number (``observation["role"]``)
ROLES = ("solve", "curate")
ROLE_SOLVE, ROLE_CURATE = 0, 1
#: answer tags: a SOLVE answer's command, a CURATE answer's document, a REFLECT answer's reflection
ACTION_TAG, SKILL_TAG, REFLECTION_TAG = "action", "skill", "remark"
SKILL_CHAR_LIMIT = 4000
STYLES = ("full", "compact")
CARRY_MODES = ("skill", "none", "reflect")
NO_EXPERIENCE_PLACEHOLDER = "(No earlier experience yet.)"
#: the empty document in compact prompts (every token counts for small models)
COMPACT_EMPTY = "(none yet)"
EMPTY_SKILL_PLACEHOLDER = "(The skill document is empty: no skills have been distilled yet.)"
#: longest observation text shown in a prompt; longer ones are cut in the middle with a marker
OBSERVATION_CHAR_LIMIT = 8000

# C0 controls but tab and newline, DEL, C1 controls, lone surrogates (py4j and UTF-8 cannot encode them)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
# NEL and the Unicode line and paragraph separators become \n
_BREAKS = re.compile("[\x85\u2028\u2029]")


@dataclass(frozen=True)
class Profile:
    """What differs between benchmarks in the prompts."""

    agent_role: str
    family_words: str
    abstraction_examples: str
    extra_curate_advice: str = ""
    history_window: int = 15
    lowercase_actions: bool = True
    #: whether a REFLECT prompt exists for this benchmark (carry mode "reflect")
    reflect: bool = True
    #: the shape of a document in compact prompts' example answer (small models copy examples: keep it generic)
    skill_example: str = "first general rule; second general rule"
    #: the example action when no admissible list is shown (compact prompts: also when every listed action is a
    #: template)
    action_example: str = "look around"
    #: how a backend's `ActionGrammar` is worded where no admissible list is shown ({templates}, {objects}:
    #: comma-joined); None: the generic wording `GRAMMAR_TEMPLATE`
    action_grammar: str | None = None


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
        action_example="search[red shoes]",
        # the backend's two templates, worded by hand (what a click names is on the page)
        action_grammar="Actions: search[<query>] on the search page; click[<button, product id or option>] for an "
        "item listed on the page, e.g. click[buy now].",
    ),
    "scienceworld": Profile(
        agent_role="You are an expert agent in ScienceWorld, a text-based simulation of elementary-school "
        "science experiments.",
        family_words="science tasks of the same kind",
        abstraction_examples='substance names, container colours, room names and thresholds become "the target '
        'substance", "the designated container"',
        history_window=10,
        lowercase_actions=False,
        # the reference's wording
        action_grammar="Valid_actions: {templates}, OBJ needs to be replaced with one of the following objects: "
        "{objects}\nexample: focus on door",
    ),
    "rulebook": Profile(
        agent_role="You sort items into bins by hidden rules.",
        family_words="sorting tasks with the same hidden rules",
        abstraction_examples='brands, sizes and colours of the item ("a large red Voltix jar") drop out; '
        'keep the rule: "glass goes in the blue bin"',
        history_window=3,
    ),
    "toy": Profile(
        agent_role="You are an agent in a small text game.",
        family_words="tasks of the same kind",
        abstraction_examples='specific names become "the target"',
        history_window=10,
    ),
}

SOLVE_TEMPLATE = """{agent_role}

{carried}

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

SKILL_SECTION = """## Current Skill Document
These skills were distilled from earlier {family_words}. Apply them only when you are confident they fit \
the current situation; ignore anything that does not.
{skill_document}"""

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


COMPACT_SOLVE_TEMPLATE = """{agent_role}
Skills: {skill_document}
Task: {task}
Now: {observation}
{history}Actions: {actions}
Example answer: <action>{example}</action>
Your answer:"""

COMPACT_CURATE_TEMPLATE = """Rewrite the skills for later {family_words}. Keep rules that hold; add what this attempt revealed; \
drop instance details.
Old skills: {skill_document}
Task: {task}
{trajectory}Outcome: {outcome}
Example answer: <skill>{skill_example}</skill>
Your answer:"""

REFLECT_TEMPLATE = """You are reflecting on an attempt at one of a series of related {family_words}. \
Later tasks of the series will be DIFFERENT instances of the same family, and they will see your reflection.

## The Task Just Attempted
{task}

## What Happened (the agent's actions and the observations that followed)
{trajectory}
Outcome: {outcome}

## Your Job
Reflect on this attempt: what worked, what went wrong and why, and what transferable guidance follows for \
later tasks of this family (abstract away instance details; for example {abstraction_examples}).
Reason first, then write the reflection inside <remark></remark> tags."""

COMPACT_REFLECT_TEMPLATE = """Reflect on this attempt for later {family_words}.
Task: {task}
{trajectory}Outcome: {outcome}
Example answer: <remark>{skill_example}</remark>
Your answer:"""

EXPERIENCE_HEADING = "## Experience From Earlier Tasks"


@dataclass(frozen=True)
class Reflection:
    """One earlier task's reflection, as later solve prompts show it (carry mode "reflect")."""

    position: int
    family: str
    success: bool
    text: str


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


def check_style(style: str) -> str:
    if style not in STYLES:
        raise ValueError(f"unknown prompt style {style!r}; known styles: {', '.join(STYLES)}")
    return style


def check_carry(carry: str, benchmark: str) -> str:
    """Validate a carry mode for a benchmark ("reflect" needs the benchmark's REFLECT prompt)."""
    if carry not in CARRY_MODES:
        raise ValueError(f"unknown carry mode {carry!r}; known carry modes: {', '.join(CARRY_MODES)}")
    if carry == "reflect" and not profile(benchmark).reflect:
        raise ValueError(f"carry mode 'reflect' needs a reflect prompt, and {benchmark} has none")
    return carry


def profile(benchmark: str) -> Profile:
    try:
        return PROFILES[benchmark]
    except KeyError:
        raise ValueError(f"no prompt profile for benchmark {benchmark!r}; known: {', '.join(PROFILES)}") from None


GRAMMAR_TEMPLATE = "Actions: {templates}"
GRAMMAR_OBJECTS = "; objects: {objects}"


def render_action_grammar(benchmark: str, grammar: ActionGrammar | None) -> str | None:
    """A backend's `ActionGrammar` worded for `benchmark`'s prompts (None for None)."""
    if grammar is None:
        return None
    fields = {"templates": ", ".join(grammar.templates), "objects": ", ".join(grammar.objects)}
    wording = profile(benchmark).action_grammar
    if wording is None:
        wording = GRAMMAR_TEMPLATE + (GRAMMAR_OBJECTS if grammar.objects else "")
    return wording.format(**fields)


def clean_text(text: str) -> str:
    """Text as it may cross the env boundary (actions, documents, observations): line breaks as newlines, no
    control characters other than newline and tab, no lone surrogates (they confuse tokenizers, crash py4j
    and cannot be written as UTF-8)."""
    return _CONTROL.sub("", _BREAKS.sub("\n", text))


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
    action_grammar: ActionGrammar | None = None,
    style: str = "full",
    carry: str = "skill",
) -> str:
    """The SOLVE prompt. `skill_document` is what crosses tasks in carry mode `carry`: the document ("skill"),
    "" ("none"), or `render_experience(...)` ("reflect": full prompts show it under its own heading instead of
    the skill document's section). `action_grammar` is shown (worded by the benchmark's profile) where there is
    no admissible list."""
    prof = profile(benchmark)
    check_carry(carry, benchmark)
    grammar_text = render_action_grammar(benchmark, action_grammar)
    if check_style(style) == "compact":
        return _compact_solve(prof, skill_document, task, observation, history, admissible_actions, grammar_text)
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
        actions = grammar_text or "(no list available: use the commands the environment understands)"
        example = prof.action_example
    if carry == "reflect":  # the list of earlier reflections, with its own heading
        carried = skill_document.strip()
    else:
        carried = SKILL_SECTION.format(family_words=prof.family_words, skill_document=render_skill(skill_document))
    return SOLVE_TEMPLATE.format(
        agent_role=prof.agent_role,
        carried=carried,
        task=task_line(task),
        observation=clip_middle(observation.strip()),
        history=history_text,
        actions=actions,
        example=example,
    ).strip()


def task_line(task: str) -> str:
    """The task as the full solve prompt's "Your task is to: ..." line takes it: an engine text that already
    begins so (ScienceWorld's descriptions: "Your task is to boil water...") loses that beginning, so the line
    does not say it twice."""
    task = task.strip()
    head = re.match(r"(?i)your task is to\s*:?\s*", task)
    return task[head.end():] if head and head.end() < len(task) else task


def _compact_solve(prof: Profile, skill_document: str, task: str, observation: str, history: Sequence[Step],
                   admissible_actions: Sequence[str] | None, grammar_text: str | None) -> str:
    shown = list(history)[-prof.history_window:]
    history_text = "".join(f"Did: {clip_middle(s.action, 200)} -> {clip_middle(s.observation, 600)}\n" for s in shown)
    if admissible_actions:
        actions = " | ".join(admissible_actions)
    else:
        actions = grammar_text or "(the commands the environment understands)"
    # the example answer is a concrete action: small models copy it, so never a template like search[<your query>]
    concrete = [a for a in admissible_actions or () if "<" not in a]
    example = concrete[0] if concrete else prof.action_example
    return COMPACT_SOLVE_TEMPLATE.format(
        example=example,
        agent_role=prof.agent_role,
        skill_document=_one_block(skill_document.strip() or COMPACT_EMPTY),
        task=task.strip(),
        observation=clip_middle(observation.strip(), 2000),
        history=history_text,
        actions=actions,
    ).strip()


def _one_block(text: str) -> str:
    return text if "\n" not in text else "\n" + text


def render_experience(reflections: Sequence[Reflection]) -> str:
    """The solve prompt's section for carry mode "reflect" (the reference's wording, in our words)."""
    lines = [EXPERIENCE_HEADING]
    if not reflections:
        lines.append(NO_EXPERIENCE_PLACEHOLDER)
    for r in reflections:
        outcome = "SUCCESS" if r.success else "FAILURE"
        lines.append(f"- After earlier task {r.position + 1} ({r.family}, outcome: {outcome}), you noted: {r.text}")
    return "\n".join(lines)


def curate_prompt(
    benchmark: str,
    *,
    skill_document: str,
    task: str,
    history: Sequence[Step],
    success: bool,
    style: str = "full",
) -> str:
    prof = profile(benchmark)
    if check_style(style) == "compact":
        return COMPACT_CURATE_TEMPLATE.format(
            family_words=prof.family_words, skill_document=_one_block(skill_document.strip() or COMPACT_EMPTY),
            task=task.strip(), trajectory=_compact_trajectory(history), outcome=_outcome(success),
            skill_example=prof.skill_example,
        ).strip()
    return CURATE_TEMPLATE.format(
        family_words=prof.family_words,
        skill_document=render_skill(skill_document),
        task=task.strip(),
        trajectory=(render_history(history) or "(no actions were taken)") + "\n",
        outcome=_outcome(success),
        abstraction_examples=prof.abstraction_examples,
        extra_advice=(prof.extra_curate_advice + "\n") if prof.extra_curate_advice else "",
    ).strip()


def reflect_prompt(
    benchmark: str,
    *,
    task: str,
    history: Sequence[Step],
    success: bool,
    style: str = "full",
) -> str:
    """The REFLECT prompt of carry mode "reflect" (answer inside <remark></remark>)."""
    prof = profile(benchmark)
    check_carry("reflect", benchmark)
    if check_style(style) == "compact":
        return COMPACT_REFLECT_TEMPLATE.format(
            family_words=prof.family_words, task=task.strip(), trajectory=_compact_trajectory(history),
            outcome=_outcome(success), skill_example=prof.skill_example,
        ).strip()
    return REFLECT_TEMPLATE.format(
        family_words=prof.family_words, task=task.strip(),
        trajectory=(render_history(history) or "(no actions were taken)") + "\n",
        outcome=_outcome(success), abstraction_examples=prof.abstraction_examples,
    ).strip()


def answer_prefix(role: str, style: str, carry: str = "skill") -> str:
    """The start of the answer that a model which can be prefilled (the hf agent, the trainer) is given after the
    chat template's assistant header: the opening tag in compact prompts (small models then answer in the
    format), nothing in full prompts (they reason first). The answer text is this prefix plus the completion."""
    if check_style(style) != "compact":
        return ""
    if role == "solve":
        return f"<{ACTION_TAG}>"
    return f"<{REFLECTION_TAG}>" if carry == "reflect" else f"<{SKILL_TAG}>"


def needs_prefill(style: str) -> bool:
    """Whether prompts of `style` expect the answer to start prefilled with `answer_prefix` (compact: the opening
    tag of every SOLVE, CURATE and REFLECT answer); an agent that cannot prefill (`agents.base.check_prefill`)
    would answer them without the tag."""
    return any(answer_prefix(role, style, carry) for role in ROLES for carry in CARRY_MODES)


def _outcome(success: bool) -> str:
    return "SUCCESS" if success else "FAILURE (the task was not completed)"


def _compact_trajectory(history: Sequence[Step]) -> str:
    if not history:
        return "(no actions were taken)\n"
    return "".join(f"Did: {clip_middle(s.action, 200)} -> {clip_middle(s.observation, 600)}\n" for s in history)


def _tagged(text: str, tag: str, last: bool) -> tuple[str | None, bool]:
    """(the inside of one <tag>...</tag> pair or None, whether that pair stands alone).

    The pair: with `last` False, the first closing tag and the opening tag nearest before it; with `last`
    True, the last opening tag that is closed and the first closing tag after it. Either way the inside holds
    no tag of the same name. The pair does not stand alone (it is nested) when another opening tag comes
    between it and the closing tag before it, or another closing tag follows it before the next opening tag:
    ``<action><action>go</action></action>`` gives "go", not well-formed.
    """
    lower = text.lower()
    open_tag, close_tag = f"<{tag}>", f"</{tag}>"
    opens = [m.start() for m in re.finditer(re.escape(open_tag), lower)]
    closes = [m.start() for m in re.finditer(re.escape(close_tag), lower)]
    if not opens or not closes:
        return None, False
    if last:
        closed = [o for o in opens if o < closes[-1]]
        start = closed[-1] if closed else None
    else:
        before = [o for o in opens if o < closes[0]]
        start = before[-1] if before else None
    if start is None:
        return None, False
    end = min(c for c in closes if c > start)
    previous_close = max((c for c in closes if c < start), default=-1)
    next_open = min((o for o in opens if o > end), default=len(lower))
    nested = any(previous_close < o < start for o in opens) or any(end < c < next_open for c in closes)
    return text[start + len(open_tag) : end], not nested


def parse_action(text: str, benchmark: str = "alfworld") -> ParsedAction:
    """The command an answer gives, and whether the answer was well-formed.

    The command: the inside of the first ``<action>...</action>`` pair; an opening tag never closed (a
    completion cut by its token budget) gives the rest of its line; text without the tag is the command
    as a whole. Control characters go, line breaks inside become spaces, and the command is lower-cased
    where the benchmark is case-blind. This is what the env sends to the engine, whatever the format.
    Well-formed (`valid`): a closed pair that is not nested, with a non-empty command.
    """
    if not isinstance(text, str):
        raise TypeError(f"model output must be a str, got {type(text).__name__}")
    inner, alone = _tagged(text, ACTION_TAG, last=False)
    opening = f"<{ACTION_TAG}>"
    if inner is None and opening in text.lower():
        rest = text[text.lower().rfind(opening) + len(opening):].strip()
        raw = rest.splitlines()[0] if rest else ""
    else:
        raw = text if inner is None else inner
    action = clean_text(raw).strip()
    action = " ".join(action.split()) if "\n" in action else action
    if profile(benchmark).lowercase_actions:
        action = action.lower()
    return ParsedAction(action=action, valid=inner is not None and alone and bool(action))


def _parse_last_tagged(text: str, tag: str, limit: int) -> ParsedSkill:
    """The inside of the last closed <tag>...</tag> pair (the whole text without one), cleaned and cut to `limit`
    characters; well-formed only with a pair that is not nested."""
    if not isinstance(text, str):
        raise TypeError(f"model output must be a str, got {type(text).__name__}")
    inner, alone = _tagged(text, tag, last=True)
    document = clean_text(inner if inner is not None else text).strip()[:limit].strip()
    return ParsedSkill(document=document, valid=inner is not None and alone)


def parse_skill(text: str, limit: int = SKILL_CHAR_LIMIT) -> ParsedSkill:
    """The document inside the last <skill>...</skill>, cut to `limit` characters (a CURATE answer)."""
    return _parse_last_tagged(text, SKILL_TAG, limit)


def parse_reflection(text: str, limit: int = SKILL_CHAR_LIMIT) -> ParsedSkill:
    """The reflection inside the last <remark>...</remark> (a REFLECT answer): the same rule as `parse_skill`."""
    return _parse_last_tagged(text, REFLECTION_TAG, limit)


def action_answer(command: str) -> str:
    """A well-formed SOLVE answer (what scripted agents and warm-start targets write)."""
    return f"<{ACTION_TAG}>{command}</{ACTION_TAG}>"


def skill_answer(document: str) -> str:
    """A well-formed CURATE answer in carry mode "skill"."""
    return f"<{SKILL_TAG}>{document}</{SKILL_TAG}>"


def reflection_answer(text: str) -> str:
    """A well-formed answer to a REFLECT prompt (carry mode "reflect")."""
    return f"<{REFLECTION_TAG}>{text}</{REFLECTION_TAG}>"
