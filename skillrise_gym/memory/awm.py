"""AWM, Agent Workflow Memory: reusable workflows induced from successful trajectories.

Wang, Mao, Fried, Neubig. "Agent Workflow Memory." arXiv:2409.07429, 2024; code:
github.com/zorazrw/agent-workflow-memory (webarena/pipeline.py, webarena/induce_prompt.py).

Online, as the code runs WebArena: after each task judged successful, the workflows are induced again from the
pool of every successful trajectory so far and the result REPLACES the memory (the code overwrites its
workflow file; the memory is a function of the success pool, not of the previous workflows). The judge here is
the env's own success (the code's `--criteria gt`; its default is an LLM evaluator). The code samples one
trajectory per task template; a sequence's tasks are all one family (one template), so that would leave one
trajectory: here each distinct task's success is kept (the latest 8 shown). A failed task changes nothing, and
before the first success the document is empty. The induction asks for workflows as the paper does: the
common sub-routines of the examples, each of at least two steps, not overlapping, instance values replaced by
descriptive variables, covering as many tasks as possible.
"""

from __future__ import annotations

from typing import Any

from skillrise_gym.memory.base import MemoryMethod, Request, Update, family_words

INDUCE = """Given a list of {family} that were solved, with the actions that solved each, extract the common \
workflows: reusable sub-routines of actions that recur across the examples.

Rules:
- Each workflow is a sequence of at least two steps, with a short name saying what it achieves.
- Workflows must not be similar to or overlap with one another.
- Replace values specific to one example (object names, numbers, locations, product attributes) with \
descriptive variables in braces, e.g. {{target object}}.
- Cover as many of the examples as possible.

Write each as:
Workflow <n>: <name>
<step>: <action with variables>   (one line per step, with a few words on why)

## Concrete Examples
{examples}

## Summary Workflows"""


class AWM(MemoryMethod):
    name = "awm"
    paper = "Wang et al., Agent Workflow Memory, arXiv:2409.07429, 2024"
    summary = "workflows induced from the successful trajectories so far (replaced at each success)"

    def __init__(self, shown: int = 8) -> None:
        self.shown = shown

    def new_memory(self) -> dict[str, Any]:
        return {"successes": [], "workflows": ""}

    def update(self, memory: dict[str, Any], attempt: dict[str, Any], benchmark: str) -> Update:
        if not attempt.get("success"):
            return dict(memory)
        pool = [a for a in memory["successes"] if a.get("task_id") != attempt.get("task_id")] + [attempt]
        examples = "\n\n".join(example(a) for a in pool[-self.shown:])
        answer = yield Request(INDUCE.format(family=family_words(benchmark), examples=examples), "induce workflows")
        workflows = answer.split("## Summary Workflows")[-1].strip()
        return {"successes": pool, "workflows": workflows or memory["workflows"]}

    def render(self, memory: dict[str, Any]) -> str:
        return memory["workflows"]


def example(attempt: dict[str, Any]) -> str:
    """One successful trajectory as the induction prompt shows it: the query, then its actions."""
    actions = [action for action, _ in attempt.get("trajectory") or []]
    return f"Query: {attempt.get('task') or ''}\nActions:\n" + "\n".join(f"- {a}" for a in actions)
