"""Reflexion: verbal self-reflection on failed attempts, kept in a small episodic buffer.

Shinn, Cassano, Gopinath, Narasimhan, Yao. "Reflexion: Language Agents with Verbal Reinforcement Learning."
NeurIPS 2023 (arXiv:2303.11366); code: github.com/noahshinn/reflexion (alfworld_runs/).

Procedure, as the paper's ALFWorld runs do it, across the tasks of a sequence instead of the trials of one
task: after an attempt that FAILED, one model call reads the attempt and writes a short reflection (what went
wrong, and a concrete plan that would avoid it); a successful attempt adds nothing (no call). The memory keeps
the latest `keep` reflections (3, the paper's bound for ALFWorld); the next task's prompt shows them in order.
The env's own carry mode ``reflect`` (the reference's LaMer-style baseline) differs: it reflects after every
task and keeps every reflection.
"""

from __future__ import annotations

from typing import Any

from skillrise_gym.memory.base import MemoryMethod, Request, Update, family_words, show_attempt, tagged

PROMPT = """You attempted one of a series of {family} and did not succeed. Later tasks of the series are \
different instances of the same family.

{attempt}

Diagnose in a few sentences why the attempt failed, then state a concrete plan that would avoid the failure \
in the next task of this family (general, not tied to this instance's names).
Write the reflection inside <reflection></reflection> tags."""


class Reflexion(MemoryMethod):
    name = "reflexion"
    paper = ("Shinn et al., Reflexion: Language Agents with Verbal Reinforcement Learning, NeurIPS 2023 "
             "(arXiv:2303.11366)")
    summary = "reflections on failed attempts, the latest 3"

    def __init__(self, keep: int = 3) -> None:
        self.keep = keep

    def new_memory(self) -> list[str]:
        return []

    def update(self, memory: list[str], attempt: dict[str, Any], benchmark: str) -> Update:
        if attempt.get("success"):
            return list(memory)
        answer = yield Request(PROMPT.format(family=family_words(benchmark), attempt=show_attempt(attempt)),
                               "reflect")
        reflection = tagged(answer, "reflection") or answer.strip()
        if not reflection:
            return list(memory)
        return (list(memory) + [" ".join(reflection.split())])[-self.keep:]

    def render(self, memory: list[str]) -> str:
        if not memory:
            return ""
        return "Reflections on earlier failed attempts:\n" + "\n".join(
            f"Attempt {i}: {text}" for i, text in enumerate(memory, 1))
