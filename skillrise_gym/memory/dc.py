"""Dynamic Cheatsheet, cumulative (DC-Cu): a cheatsheet rewritten whole by a curator after each task.

Suzgun, Yuksekgonul, Bianchi, Jurafsky, Zou. "Dynamic Cheatsheet: Test-Time Learning with Adaptive Memory."
arXiv:2504.07952, 2025; code: github.com/suzgunmirac/dynamic-cheatsheet (DynamicCheatsheet_Cumulative,
prompts/curator_prompt_for_dc_cumulative.txt, utils/extractor.py).

After each task, one curator call receives the previous cheatsheet, the current input (the task and what the
agent first saw) and the model's answer (here: the agent's actions and what followed), and NO correctness
signal (DC's curator judges the solution itself; the env's feedback lines stay in the trajectory, as the
model's answer would hold them). It rewrites the whole cheatsheet inside <cheatsheet></cheatsheet>: a version
line, then memory items (a description naming the tasks it came from, an example) each with a usage count
the curator maintains in the text; what it does not copy over is lost. The first <cheatsheet>...</cheatsheet>
of the answer is the new cheatsheet; without one, the old is kept. The first cheatsheet is "(empty)".
"""

from __future__ import annotations

import re
from typing import Any

from skillrise_gym.memory.base import MemoryMethod, Request, Update, family_words, show_attempt

EMPTY = "(empty)"

CURATE = """You are the curator of a cheatsheet: a cumulative memory of reusable strategies, patterns and \
pitfalls that an agent consults before each of a series of {family}.

PREVIOUS CHEATSHEET:
{cheatsheet}

CURRENT INPUT (task {index}):
{task}

MODEL ANSWER (what the agent did, and what followed each action):
{answer}

Judge for yourself whether the agent's solution worked. Then write the UPDATED CHEATSHEET:
- Start with "Version: <n>" (one more than the previous version).
- Keep every useful item of the previous cheatsheet: anything you do not copy over is lost.
- Add what this task taught that will help later tasks; refine or merge items; drop what proved wrong.
- Each item: <memory_item><description>the situation and the strategy (Reference: the task numbers it came \
from)</description><example>a short example of applying it</example></memory_item> followed by ** Count: <how \
many tasks it has helped>.
- Keep it general: no instance names that will not recur.
Write the whole updated cheatsheet inside <cheatsheet></cheatsheet>."""

CHEATSHEET = re.compile(r"<cheatsheet>(.*?)</cheatsheet>", re.S | re.I)


class DynamicCheatsheet(MemoryMethod):
    name = "dc"
    paper = ("Suzgun et al., Dynamic Cheatsheet: Test-Time Learning with Adaptive Memory, arXiv:2504.07952, "
             "2025 (DC-Cu)")
    summary = "a cheatsheet the curator rewrites whole after each task, no correctness given"

    def new_memory(self) -> str:
        return EMPTY

    def update(self, memory: str, attempt: dict[str, Any], benchmark: str) -> Update:
        task = show_attempt({**attempt, "trajectory": []}, outcome=False)
        answer_text = show_attempt({"trajectory": attempt.get("trajectory") or []}, outcome=False)
        answer_text = answer_text.split("\n", 1)[1] if "\n" in answer_text else "(no action)"
        answer = yield Request(CURATE.format(family=family_words(benchmark), cheatsheet=memory,
                                             index=int(attempt.get("position", 0)) + 1, task=task,
                                             answer=answer_text), "rewrite the cheatsheet")
        found = CHEATSHEET.search(answer or "")
        return found.group(1).strip() if found and found.group(1).strip() else memory

    def render(self, memory: str) -> str:
        return "" if memory == EMPTY else memory
