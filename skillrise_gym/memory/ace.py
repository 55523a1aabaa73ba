"""ACE, Agentic Context Engineering: a playbook of itemised bullets with helpful/harmful counters, grown by a
reflector's tags and a curator's delta operations.

Zhang et al. "Agentic Context Engineering: Evolving Contexts for Self-Improving Language Models."
arXiv:2510.04618 (ICLR 2026); code: github.com/ace-agent/ace (ace/ace.py, ace/core/reflector.py,
ace/core/curator.py, playbook_utils.py).

The playbook: bullets in fixed sections, each one line ``[slug-00012] helpful=H harmful=M :: content``, ids
from one counter that never reuses a number. After each task, two calls, as ACE's online mode does per sample:
1. the reflector reads the task, the trajectory, the env's feedback (success or failure: the ground truth
   ACE's reflector gets) and the playbook, and answers in JSON: reasoning, error identification, root cause,
   correct approach, key insight, and `bullet_tags` ([{id, tag}], tag helpful, harmful or neutral); helpful
   adds 1 to a bullet's helpful count, harmful to its harmful count. (ACE's generator cites the bullets it
   used and only those are shown to the reflector; the solver here is any agent, which cites nothing, so the
   reflector sees the whole playbook and tags what it judges was used.)
2. the curator reads the playbook, the reflection and the task, and answers in JSON with operations; only
   ADD ({type: ADD, section, content}) is applied, as in ACE's code (its UPDATE/MERGE/DELETE are accepted and
   ignored); an unknown section goes to "others"; a new bullet starts at 0/0 at the end of its section.
An answer that is not JSON leaves the playbook as it was. ACE's optional de-duplication (embedding similarity,
off by default in its code) and its retries of a wrong answer (the solver here has one attempt) are not done.
"""

from __future__ import annotations

import json
import re
from typing import Any

from skillrise_gym.memory.base import MemoryMethod, Request, Update, family_words, json_object, show_attempt

#: the playbook's sections, in order, with their id slugs (ACE's playbook template)
SECTIONS = {"strategies_and_insights": "str", "formulas_and_calculations": "calc",
            "code_snippets_and_templates": "code", "common_mistakes_to_avoid": "err",
            "problem_solving_heuristics": "prob", "context_clues_and_indicators": "ctx", "others": "misc"}
TAGS = ("helpful", "harmful", "neutral")

REFLECT = """You are an expert analyst reviewing an agent's attempt at one of a series of {family}, to improve \
the playbook the agent consults.

PLAYBOOK:
{playbook}

TASK AND ATTEMPT:
{attempt}

Analyse the attempt with the feedback above. Identify what went wrong (if anything), its root cause, the \
approach that works, and the key insight for later tasks of this family. Tag each playbook bullet the agent \
used or should have used as helpful, harmful or neutral.
Answer with JSON only:
{{"reasoning": "...", "error_identification": "...", "root_cause_analysis": "...", \
"correct_approach": "...", "key_insight": "...", "bullet_tags": [{{"id": "str-00001", "tag": "helpful"}}]}}"""

CURATE = """You are the curator of a playbook that an agent consults before each of a series of {family}. \
Add only NEW insights that the playbook is missing, from the reflection below; do not rewrite or repeat \
existing bullets. Each insight is one concrete, reusable sentence without instance names.

SECTIONS: {sections}

PLAYBOOK:
{playbook}

TASK:
{task}

REFLECTION:
{reflection}

Answer with JSON only:
{{"reasoning": "...", "operations": [{{"type": "ADD", "section": "common_mistakes_to_avoid", \
"content": "..."}}]}}"""


class ACE(MemoryMethod):
    name = "ace"
    paper = ("Zhang et al., Agentic Context Engineering: Evolving Contexts for Self-Improving Language Models, "
             "arXiv:2510.04618 (ICLR 2026)")
    summary = "a playbook of bullets with helpful/harmful counters, grown by a reflector and a curator"

    def new_memory(self) -> dict[str, Any]:
        return {"bullets": [], "next": 1}

    def update(self, memory: dict[str, Any], attempt: dict[str, Any], benchmark: str) -> Update:
        bullets = [dict(b) for b in memory["bullets"]]
        family = family_words(benchmark)
        answer = yield Request(REFLECT.format(family=family, playbook=self.render(memory) or "(empty)",
                                              attempt=show_attempt(attempt)), "reflect")
        reflection = json_object(answer)
        if reflection is None:
            return {"bullets": bullets, "next": memory["next"]}
        by_id = {b["id"]: b for b in bullets}
        tags = reflection.get("bullet_tags")
        for tag in tags if isinstance(tags, list) else []:  # a model's JSON: any shape may come back
            if (isinstance(tag, dict) and tag.get("tag") in ("helpful", "harmful") and isinstance(tag.get("id"), str)
                    and tag["id"] in by_id):
                by_id[tag["id"]][tag["tag"]] += 1
        tagged = {"bullets": bullets, "next": memory["next"]}
        answer = yield Request(CURATE.format(family=family, sections=", ".join(SECTIONS),
                                             playbook=self.render(tagged) or "(empty)",
                                             task=show_attempt({**attempt, "trajectory": []}, outcome=False),
                                             reflection=json.dumps({k: v for k, v in reflection.items()
                                                                    if k != "bullet_tags"}, ensure_ascii=False)),
                               "curate")
        operations = (json_object(answer) or {}).get("operations")
        return self.merge(tagged, operations if isinstance(operations, list) else [])

    @staticmethod
    def merge(memory: dict[str, Any], operations: list[Any]) -> dict[str, Any]:
        """ACE's deterministic merge: each ADD becomes a bullet (a new id, 0/0) at the end of its section
        (an unknown section: others); other operation types are ignored."""
        bullets, number = [dict(b) for b in memory["bullets"]], int(memory["next"])
        for op in operations:
            if not isinstance(op, dict) or str(op.get("type", "")).upper() != "ADD":
                continue
            content = " ".join(str(op.get("content") or "").split())
            if not content:
                continue
            section = re.sub(r"[^a-z0-9]+", "_", str(op.get("section") or "").lower()).strip("_")
            section = section if section in SECTIONS else "others"
            bullets.append({"id": f"{SECTIONS[section]}-{number:05d}", "section": section, "helpful": 0,
                            "harmful": 0, "content": content})
            number += 1
        return {"bullets": bullets, "next": number}

    def render(self, memory: dict[str, Any]) -> str:
        lines: list[str] = []
        for section in SECTIONS:
            rows = [b for b in memory["bullets"] if b["section"] == section]
            if rows:
                lines.append(f"## {section.replace('_', ' ').upper()}")
                lines += [f"[{b['id']}] helpful={b['helpful']} harmful={b['harmful']} :: {b['content']}" for b in rows]
        return "\n".join(lines)
