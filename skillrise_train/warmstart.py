"""A supervised warm start that teaches the answer FORMAT and nothing about any task's solution.

A randomly initialised model (the tiny test model) never emits a well-formed action, so every return is 0
and RL has no gradient. Before RL, `warm_start` fine-tunes the policy on format-only targets collected by
playing training sequences with a format agent:

- SOLVE turn:  ``<action>A</action>`` with A drawn uniformly from the admissible actions;
- CURATE turn: ``<skill>w_1 ... w_n</skill>`` with 1-3 words copied at random (uniformly, with repeats)
  from the finished task's last observation.

Neither target depends on what is right: the action is a uniform guess (success stays at 1/N) and the
document is random words, so the warm-started policy is still at chance at every position of the transfer
probe. What it has learnt is to answer inside the tags and to copy words into a document; which words carry
knowledge, and that a solve turn should read them, is left to RL. Targets end with the tokenizer's end of
sequence token so that generation stops after the closing tag.
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
                target = f"<action>{actions[int(rng.integers(len(actions)))]}</action>"
            else:
                words = base.records[-1].observation.split() or ["none"]
                picks = rng.integers(len(words), size=int(rng.integers(1, 4)))
                target = "<skill>" + " ".join(words[int(i)] for i in picks) + "</skill>"
            examples.append(Example(str(obs["prompt"]), target, str(obs.get("answer_prefix") or "")))
            obs, _reward, done, _truncated, _info = env.step(target)
    return examples


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
