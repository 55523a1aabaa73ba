"""A supervised warm start that teaches the answer format and to follow the document, and no task's solution.

A randomly initialised model (the tiny test model) never emits a well-formed action, so every return is 0
and RL has no gradient. Before RL, `warm_start` fine-tunes the policy on targets collected by playing
training sequences with a format agent that knows nothing about what is right:

- SOLVE turn:  ``<action>A</action>``: the admissible action the current document names (most words in
  common with the document, not counting words every action shares), or, when it names none, one drawn
  uniformly. This is "read your notes", the behaviour any instruction-tuned model brings; it carries no rule,
  because the documents it is trained on are random words.
- CURATE turn: ``<skill>C</skill>`` with C one clause copied at random (uniformly) from the finished task's
  trajectory: its actions and the observations that followed, cut at sentence and clause marks (. , : ; ! ?).

Which words a document should keep is left to RL, and only curate credit can teach it: a solve turn that
follows a document is right only when the document holds the rule. The warm-started policy is near chance
(a random document names the right bin now and then: the bench measures it as the "untrained" policy).
Why the solve side is taught to follow the document: with random-admissible solve targets alone, the tiny
model did not learn to read its document within a few hundred RL steps (measured; docs/rulebook.md), and the
suite's learning test must finish in minutes. Targets end with the tokenizer's end of sequence token so
that generation stops after the closing tag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np


@dataclass(frozen=True)
class Example:
    prompt: str
    target: str  # the whole answer, tags included
    prefix: str = ""  # the answer prefix the policy is given (compact prompts): not a target token


def format_examples(env: Any, sequences: int, seed: int = 0) -> list[Example]:
    """Prompts and format-only targets from `sequences` episodes of a `SequenceEnv` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    examples: list[Example] = []
    base = env.unwrapped
    for n in range(sequences):
        obs, _info = env.reset(seed=int(rng.integers(2**31)))
        done = False
        while not done:
            if int(obs["role"]) == 0:
                actions = list(obs["admissible_actions"])
                if not actions:
                    raise ValueError(f"{base.benchmark}: the format warm start needs admissible actions")
                named = named_action(actions, str(obs["skill_document"]))
                choice = named if named is not None else actions[int(rng.integers(len(actions)))]
                target = f"<action>{choice}</action>"
            else:
                clauses = trajectory_clauses(base.records[-1].history) or ["none"]
                target = "<skill>" + clauses[int(rng.integers(len(clauses)))] + "</skill>"
            examples.append(Example(str(obs["prompt"]), target, str(obs.get("answer_prefix") or "")))
            obs, _reward, done, _truncated, _info = env.step(target)
    return examples


def trajectory_clauses(history: Sequence[Any]) -> list[str]:
    """The clauses of a task's actions and observations, in order (cut at . , : ; ! ? and newlines)."""
    import re

    text = "\n".join(f"{step.action}\n{step.observation}" for step in history)
    return [c.strip() for c in re.split(r"[.,:;!?\n]+", text) if c.strip()]


def named_action(actions: Sequence[str], document: str) -> str | None:
    """The admissible action the document names: most words in common with it, ignoring words that every
    action has; None when no action is named (or several tie)."""
    words = [set(a.lower().split()) for a in actions]
    shared = set.intersection(*words) if words else set()
    present = set(document.lower().replace(".", " ").replace(",", " ").split())
    scores = [len((w - shared) & present) for w in words]
    best = max(scores, default=0)
    if best == 0 or scores.count(best) > 1:
        return None
    return actions[scores.index(best)]


def warm_start(
    model: Any,
    tokenizer: Any,
    encode_prompt: Callable[[str, str], tuple[list[int], bool]],
    examples: Sequence[Example],
    steps: int,
    batch_size: int = 16,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Cross-entropy on the target tokens only (prompts encoded as the policy sees them); returns the losses."""
    import torch

    if steps <= 0 or not examples:
        return []
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    encoded = []
    for ex in examples:
        prompt_ids, _ = encode_prompt(ex.prompt, ex.prefix)
        target = ex.target[len(ex.prefix):] if ex.target.startswith(ex.prefix) else ex.target
        target_ids = tokenizer.encode(target, add_special_tokens=False) + [eos]
        encoded.append((prompt_ids, target_ids))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    rng = np.random.default_rng(seed)
    device = next(model.parameters()).device
    was_training = model.training
    model.train()
    losses = []
    for _ in range(steps):
        rows = [encoded[int(i)] for i in rng.integers(len(encoded), size=batch_size)]
        width = max(len(p) + len(t) for p, t in rows)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        for r, (p, t) in enumerate(rows):  # left padding, as generation sees prompts
            seq = p + t
            start = width - len(seq)
            ids[r, start:] = torch.tensor(seq)
            mask[r, start:] = 1
            labels[r, width - len(t):] = torch.tensor(t)
        out = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device))
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        losses.append(float(out.loss.detach()))
    model.train(was_training)
    return losses
