"""ExpeL: insights extracted from compared trajectories, edited by ADD / EDIT / AGREE / REMOVE operations, each
insight with an importance count.

Zhao, Huang, Xu, Lin, Liu, Huang. "ExpeL: LLM Agents Are Experiential Learners." AAAI 2024 (arXiv:2308.10144);
code: github.com/LeapLabTHU/ExpeL (agent/expel.py: create_rules, parse_rules, update_rules).

The paper gathers trajectories offline (Reflexion retries of training tasks), then extracts rules in two
passes, then freezes them. Here the extraction runs online, after each task of a sequence, keeping the rules
and their counts from task to task (ExpeL's code rebuilds them from scratch each time it is called: with one
attempt per task there is nothing to rebuild from). Its two passes, with "the same task" read as "the same
family" (a sequence's tasks are one family's; one attempt per task gives no same-task pair):
- compare: a FAILED attempt, when the sequence has a successful one, is compared with the latest success;
- success: a SUCCESSFUL attempt is read with the sequence's other successes (at most 8, the code's
  `success_critique_num`).
A failed attempt before any success makes no call (no pair to compare). The model answers with operations
``AGREE n: <rule>``, ``REMOVE n: <rule>``, ``EDIT n: <rule>``, ``ADD: <rule>`` (at most 4, one per rule),
parsed and validated as the code does: a line whose text is empty or does not end with a period is dropped; an
ADD whose text contains an existing rule is dropped; an EDIT whose text contains an existing rule becomes an
AGREE of it; an EDIT with no valid number is dropped; AGREE and REMOVE name their rule by its text (an existing
rule's text must occur in theirs). Applied in the order REMOVE (-1; -3 once the list holds `max_rules` + 5),
AGREE (+1), EDIT (new text, +1), ADD (count 2); rules at 0 are deleted; the list is kept sorted by count,
highest first, and shown numbered in that order (the order the next extraction's numbers refer to).
"""

from __future__ import annotations

import re
from typing import Any

from skillrise_gym.memory.base import MemoryMethod, Request, Update, family_words, numbered, show_attempt

COMPARE = """You are an advanced reasoning agent that improves itself by extracting rules from experience. \
Below are a SUCCESSFUL and a FAILED attempt at {family}.

SUCCESSFUL ATTEMPT:
{success}

FAILED ATTEMPT:
{failure}

{rules_part}

By examining and contrasting the successful attempt with the failed one, and the list of existing rules, \
you may add, edit, remove or agree with rules so that the new list holds general, high-level critiques of \
the failed attempt, or insights that apply to new tasks of this family. The rules must be general: do not \
mention the attempts or instance names."""

SUCCESSES = """You are an advanced reasoning agent that improves itself by extracting rules from experience. \
Below are successful attempts at {family}.

{successes}

{rules_part}

By examining the successful attempts and the list of existing rules, you may add, edit, remove or agree with \
rules so that the new list holds general, high-level insights that apply to new tasks of this family. The \
rules must be general: do not mention the attempts or instance names."""

GRAMMAR = """Answer with operations, one per line, each of these forms:
AGREE <number>: <the existing rule>      (the rule is strongly relevant)
REMOVE <number>: <the existing rule>     (the rule contradicts the attempts or duplicates another)
EDIT <number>: <the improved rule>       (make an existing rule more general or better)
ADD: <a new rule>                        (a new rule, very different from the existing ones)
Do at most 4 operations, at most one per existing rule. Each rule is one sentence ending with a period."""

FULL = ("\nThe list is full: focus on REMOVE operations, and ADD only a rule that is very insightful and very "
        "different from the existing ones.")

OPERATION = re.compile(r"^\s*(?:[-*\d.]+\s*)?(REMOVE|EDIT|ADD|AGREE)((?:\s+)\d+)?\s*:\s*(.*)$", re.I)


class ExpeL(MemoryMethod):
    name = "expel"
    paper = "Zhao et al., ExpeL: LLM Agents Are Experiential Learners, AAAI 2024 (arXiv:2308.10144)"
    summary = "insights with importance counts, edited by ADD/EDIT/AGREE/REMOVE from compared attempts"

    def __init__(self, max_rules: int = 10, successes: int = 8) -> None:
        self.max_rules, self.successes = max_rules, successes

    def new_memory(self) -> dict[str, Any]:
        return {"rules": [], "successes": []}

    def update(self, memory: dict[str, Any], attempt: dict[str, Any], benchmark: str) -> Update:
        rules = [list(rule) for rule in memory["rules"]]
        successes = list(memory["successes"])
        family = family_words(benchmark)
        rules_part = self._rules_part(rules)
        if attempt.get("success"):
            successes.append(attempt)
            shown = successes[-self.successes:]
            prompt = SUCCESSES.format(family=family, rules_part=rules_part, successes="\n\n".join(
                f"ATTEMPT {i}:\n{show_attempt(a)}" for i, a in enumerate(shown, 1)))
        elif successes:
            prompt = COMPARE.format(family=family, rules_part=rules_part, success=show_attempt(successes[-1]),
                                    failure=show_attempt(attempt))
        else:
            return {"rules": rules, "successes": successes}
        answer = yield Request(prompt + "\n\n" + GRAMMAR + (FULL if len(rules) >= self.max_rules else ""),
                               "extract insights")
        return {"rules": self.apply(rules, self.parse(answer, rules)), "successes": successes}

    def _rules_part(self, rules: list[list[Any]]) -> str:
        return "EXISTING RULES:\n" + (numbered([text for text, _ in rules]) if rules else "(none yet)")

    @staticmethod
    def parse(answer: str, rules: list[list[Any]]) -> list[tuple[str, int | None, str]]:
        """The valid operations of `answer` against `rules` (as ExpeL's parse_rules and its checks)."""
        texts = [text for text, _ in rules]
        operations: list[tuple[str, int | None, str]] = []
        for line in (answer or "").splitlines():
            found = OPERATION.match(line)
            if not found:
                continue
            kind, number, text = found.group(1).upper(), found.group(2), found.group(3).strip()
            if not text or not text.endswith(".") or re.search(r"\b(ADD|AGREE|EDIT)\b", text):
                continue
            index = int(number) - 1 if number else None
            named = next((i for i, existing in enumerate(texts) if existing in text), None)
            if kind == "ADD":
                if named is None:
                    operations.append(("ADD", None, text))
            elif kind == "EDIT":
                if named is not None:
                    operations.append(("AGREE", named, texts[named]))
                elif index is not None and 0 <= index < len(texts):
                    operations.append(("EDIT", index, text))
            elif named is not None:  # AGREE / REMOVE name their rule by its text
                operations.append((kind, named, texts[named]))
        return operations[:4]

    def apply(self, rules: list[list[Any]], operations: list[tuple[str, int | None, str]]) -> list[list[Any]]:
        rules = [list(rule) for rule in rules]
        touched: set[int] = set()
        penalty = 3 if len(rules) >= self.max_rules + 5 else 1
        for kind in ("REMOVE", "AGREE", "EDIT", "ADD"):
            for op, index, text in operations:
                if op != kind:
                    continue
                if kind == "ADD":
                    rules.append([text, 2])
                    continue
                if index in touched:  # at most one operation per existing rule
                    continue
                touched.add(index)
                if kind == "REMOVE":
                    rules[index][1] -= penalty
                elif kind == "AGREE":
                    rules[index][1] += 1
                else:
                    rules[index] = [text, rules[index][1] + 1]
        kept = [rule for rule in rules if rule[1] > 0]
        return sorted(kept, key=lambda rule: -rule[1])

    def render(self, memory: dict[str, Any]) -> str:
        rules = [text for text, _ in memory["rules"]]
        if not rules:
            return ""
        return ("Experiences gathered on similar tasks, in decreasing order of importance:\n" + numbered(rules))
