"""What every memory method shares: the attempt it reads, the model calls it makes, the memory it keeps.

A memory method turns one finished attempt (the env's ``info["attempt"]``: the task, its trajectory,
success) and the memory so far into the next memory, through zero or more model calls, and renders the memory
as the document the next task's prompt shows. It is written as a generator (`MemoryMethod.update`): each
``yield Request(...)`` is one model call, answered with the model's text; the generator's return value is the
new memory. `MemoryAgent` (agent.py) drives the generators of all the curate turns of one batch in lockstep,
so their calls go to the curator model together.

Methods keep their memory as a value of their own (`new_memory`, `update`, `render`); the agent keeps one per
played sequence (trial), started afresh at the sequence's first curate turn, so a replayed or resumed
sequence starts from nothing as the env does.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Generator

from skillrise_gym import prompts

#: at most this many characters of one observation in a trajectory shown to a memory method's model
OBSERVATION_CHARS = 600


@dataclass(frozen=True)
class Request:
    """One model call of a memory method: the prompt, and what the call is for (recorded with it)."""

    prompt: str
    purpose: str


Update = Generator[Request, str, Any]


class MemoryMethod(ABC):
    """One published cross-task memory method (see its module for the paper and the procedure)."""

    name: ClassVar[str]
    #: the paper, as the docs cite it
    paper: ClassVar[str]
    #: what the next task's prompt shows, in a few words (docs and --help)
    summary: ClassVar[str]

    @abstractmethod
    def new_memory(self) -> Any:
        """The memory before the first task of a sequence."""

    @abstractmethod
    def update(self, memory: Any, attempt: dict[str, Any], benchmark: str) -> Update:
        """The memory after `attempt` (a generator: yields `Request`s, receives each answer's text, returns
        the new memory). `memory` is not modified."""

    @abstractmethod
    def render(self, memory: Any) -> str:
        """The document the next task's prompt shows."""


# ------------------------------------------------------------------------------------------ shared text
def family_words(benchmark: str) -> str:
    try:
        return prompts.profile(benchmark).family_words
    except ValueError:
        return "related tasks"


def show_attempt(attempt: dict[str, Any], outcome: bool = True) -> str:
    """The attempt as a memory method's prompt shows it: the task, the first observation, each action and
    what followed (long observations cut), and (with `outcome`) whether it succeeded."""
    lines = [f"Task: {attempt.get('task') or '(unknown)'}"]
    first = _cut(attempt.get("initial_observation") or "")
    if first:
        lines.append(f"Start: {first}")
    for i, (action, observation) in enumerate(attempt.get("trajectory") or [], 1):
        lines.append(f"{i}. > {action}\n   {_cut(observation)}")
    if attempt.get("engine_error"):
        lines.append(f"(the engine failed: {_cut(str(attempt['engine_error']))})")
    if outcome:
        lines.append("Outcome: " + ("SUCCESS" if attempt.get("success") else "FAILURE"))
    return "\n".join(lines)


def _cut(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= OBSERVATION_CHARS else text[:OBSERVATION_CHARS] + " ..."


def tagged(text: str, tag: str) -> str | None:
    """The inside of the last <tag>...</tag> of `text` (None without a closed pair)."""
    found = re.findall(rf"<{tag}>(.*?)</{tag}>", text or "", flags=re.S | re.I)
    return found[-1].strip() if found else None


def numbered(items: list[str]) -> str:
    return "\n".join(f"{i}. {item}" for i, item in enumerate(items, 1))


def json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in `text` (a fenced block or bare braces), or None when there is none that
    parses: methods whose model answers in JSON keep their memory unchanged then, as their code does."""
    import json

    candidates = re.findall(r"```(?:json)?\s*(\{.*?\})\s*```", text or "", flags=re.S)
    start = (text or "").find("{")
    if start >= 0:
        candidates.append(text[start:text.rfind("}") + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None
