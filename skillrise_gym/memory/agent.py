"""`MemoryAgent`: a chat agent that solves, with someone else deciding the documents between tasks.

Solve turns go to the solver agent unchanged. A curate turn is answered, in this order of precedence:
- after position `freeze_after`: the document as it stands (no call; `--freeze-after`);
- with `documents` (another run's, `--documents-from`): that run's document for this sequence and position,
  replayed (a transplant; no call);
- with a memory `method` (`MemoryMethod`): the method's update of the attempt the env reports
  (``info["attempt"]``, made with ``attempt_in_info=True``: the runner asks for it through
  `needs_attempt_info`), its model calls going to the curator agent;
- else: the curator agent answers the env's own CURATE prompt (who curates: `--curator-model`).
The curator is the solver itself unless another is given. The env receives one CURATE action, the document in
<skill> tags. The turn's record keeps every call (prompt, answer, tokens, seconds) under
``extra["agent"]["calls"]``, and its token counts are the calls' sums, so cost reports count the curate share.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from skillrise_gym.agents.base import Agent, AgentError, AgentOutput, is_curate, keep_document
from skillrise_gym.memory.documents import Documents
from skillrise_gym.memory.base import MemoryMethod, Request
from skillrise_gym.prompts import ROLE_CURATE, skill_answer

#: characters of each call's prompt and answer kept in the turn's record
CALL_CHARS = 4000


class MemoryAgent(Agent):
    needs_attempt_info = True  # with a memory method (each instance says)

    def __init__(self, solver: Agent, method: MemoryMethod | None, benchmark: str, curator: Agent | None = None,
                 freeze_after: int | None = None, documents: Documents | None = None) -> None:
        self.solver, self.method, self.benchmark = solver, method, benchmark
        self.curator = curator or solver
        self.freeze_after, self.documents = freeze_after, documents
        self.name = solver.name + (f"+{method.name}" if method is not None else "")  # type: ignore[misc]
        self.needs_attempt_info = method is not None  # type: ignore[misc]
        self.batch_size = solver.batch_size
        self.needs_expert_info = solver.needs_expert_info  # type: ignore[misc]
        self.needs_admissible = solver.needs_admissible  # type: ignore[misc]
        self.prefill_flag = solver.prefill_flag  # type: ignore[misc]
        #: each played sequence's memory, by trial id (started afresh at its first curate turn)
        self.memories: dict[str, Any] = {}

    @property
    def can_prefill(self) -> bool:  # type: ignore[override]
        return self.solver.can_prefill

    def act(self, observations: Sequence[dict[str, Any]], infos: Sequence[dict[str, Any]] | None = None) -> list[AgentOutput]:
        out: list[AgentOutput | None] = [None] * len(observations)
        solve = [i for i, o in enumerate(observations) if not is_curate(o)]
        if solve:
            answers = self.solver.act([observations[i] for i in solve],
                                      [infos[i] for i in solve] if infos is not None else None)
            for i, answer in zip(solve, answers):
                out[i] = answer
        fixed, written, asked = [], [], []
        for i, o in enumerate(observations):
            if not is_curate(o):
                continue
            if self.freeze_after is not None and int(o["position"]) > self.freeze_after:
                fixed.append(i)
            elif self.documents is not None:
                written.append(i)
            elif self.method is not None:
                asked.append(i)
            else:
                asked.append(i)
        for i in fixed:
            out[i] = AgentOutput(keep_document(observations[i]), extra={"frozen_after": self.freeze_after})
        for i in written:
            info = infos[i] if infos is not None else {}
            text = self.documents.text(int(observations[i]["num_tasks"]), str(info.get("sequence_id") or ""),
                                       int(observations[i]["position"]))
            out[i] = AgentOutput(skill_answer(text), extra={"documents_from": self.documents.source})
        if asked and self.method is None:  # the curator answers the env's own prompt
            answers = self.curator.act([observations[i] for i in asked],
                                       [infos[i] for i in asked] if infos is not None else None)
            for i, answer in zip(asked, answers):
                out[i] = AgentOutput(answer.text, answer.prompt_tokens, answer.completion_tokens, answer.latency_s,
                                     {**answer.extra, "writer": self.curator.describe()})
        elif asked:
            for i, answer in zip(asked, self._curate([infos[i] if infos is not None else {} for i in asked],
                                                     [observations[i] for i in asked])):
                out[i] = answer
        return out  # type: ignore[return-value]

    def _curate(self, infos: list[dict[str, Any]], observations: list[dict[str, Any]]) -> list[AgentOutput]:
        """Every curate turn's update, driven in lockstep: each round, the pending call of every update goes to
        the curator in one `act`, and each answer is sent back to its update."""
        runs = []
        for info, observation in zip(infos, observations):
            attempt = info.get("attempt")
            if not isinstance(attempt, dict):
                raise AgentError(f"memory method {self.method.name} needs the attempt each curate turn curates "
                                 "(make the env with attempt_in_info=True)", resumable=False)
            key = str(info.get("trial_id") or info.get("sequence_id") or "")
            if int(attempt.get("position", 0)) == 0 or key not in self.memories:
                self.memories[key] = self.method.new_memory()
            update = self.method.update(self.memories[key], attempt, self.benchmark)
            # the last curate turn of a sequence (before its last task): its memory is released after it
            last = int(attempt.get("position", 0)) >= int(observation.get("num_tasks") or 0) - 2
            runs.append({"key": key, "update": update, "calls": [], "pending": None, "memory": None,
                         "started": time.monotonic(), "last": last})
        for run in runs:
            self._advance(run, None)
        while any(run["pending"] is not None for run in runs):
            waiting = [run for run in runs if run["pending"] is not None]
            answers = self.curator.act([{"role": ROLE_CURATE, "prompt": run["pending"].prompt, "answer_prefix": ""}
                                        for run in waiting])
            for run, answer in zip(waiting, answers):
                request: Request = run["pending"]
                run["calls"].append({"purpose": request.purpose, "prompt": request.prompt[:CALL_CHARS],
                                     "response": answer.text[:CALL_CHARS], "prompt_tokens": answer.prompt_tokens,
                                     "completion_tokens": answer.completion_tokens,
                                     "seconds": round(answer.latency_s, 4)})
                self._advance(run, answer.text)
        outputs = []
        for run in runs:
            document = self.method.render(run["memory"])
            if run["last"]:  # the sequence's last curate turn: its memory is not needed again
                self.memories.pop(run["key"], None)
            else:
                self.memories[run["key"]] = run["memory"]
            calls = run["calls"]
            outputs.append(AgentOutput(
                skill_answer(document), prompt_tokens=sum(c["prompt_tokens"] for c in calls),
                completion_tokens=sum(c["completion_tokens"] for c in calls),
                latency_s=sum(c["seconds"] for c in calls),
                extra={"memory": self.method.name, "writer": self.curator.describe(), "calls": calls}))
        return outputs

    @staticmethod
    def _advance(run: dict[str, Any], answer: str | None) -> None:
        try:
            run["pending"] = run["update"].send(answer)
        except StopIteration as done:
            run["pending"], run["memory"] = None, done.value

    def describe(self) -> dict[str, Any]:
        described = dict(self.solver.describe())
        if self.method is not None:
            described["memory"] = self.method.name
        if self.curator is not self.solver:
            described["curator"] = self.curator.describe()
        if self.freeze_after is not None:
            described["freeze_after"] = self.freeze_after
        if self.documents is not None:
            described["documents_from"] = {"source": self.documents.source, "hash": self.documents.digest}
        return described

    def framing(self) -> dict[str, Any]:
        return self.solver.framing()

    def model_folders(self) -> dict[str, str]:
        folders = dict(getattr(self.solver, "model_folders", dict)())
        if self.curator is not self.solver:
            folders.update({f"curator_{k}": v for k, v in getattr(self.curator, "model_folders", dict)().items()})
        return folders

    def in_flight(self) -> int:
        return self.solver.in_flight() + (self.curator.in_flight() if self.curator is not self.solver else 0)

    def close(self) -> None:
        self.solver.close()
        if self.curator is not self.solver:
            self.curator.close()
