"""A supervised warm start that teaches the answer format, to copy from the trajectory and to follow a note,
and no task's solution.

A randomly initialised model (the tiny test model) never emits a well-formed action, so every return is 0
and RL has no gradient. Before RL, `warm_start` fine-tunes the policy on targets collected by playing
training sequences with a format agent that knows nothing about what is right:

- SOLVE turn:  ``<action>A</action>``: the admissible action the current document names (most words in
  common with the document, not counting words every action shares), or, when it names none, one drawn
  uniformly.
- CURATE turn: ``<skill>C</skill>``, one clause C copied at random (uniformly) from the finished task's
  trajectory (`documents="one"`, the default), or (`documents="several"`, for probes of several rules)
  ``<skill>D; C</skill>``: the previous document D, kept, plus one clause C copied at random
  (uniformly) from the finished task's trajectory: its actions and the observations that followed, cut at
  sentence and clause marks (. , : ; ! ?); at most `DOCUMENT_CLAUSES` clauses, the oldest dropped first.
- With `documents="several"`, SOLVE turns read a document of several clauses by the clause about their
  task: when clauses name different actions, the one sharing words with the task's own wording decides
  (`named_action`); and half the reading notes hold several rules (below). "one" stays the default: with
  "several" the transfer test at one rule per family did not learn (docs/results/transfer-r2.md, has
  what each setting measured).
- Reading examples (`reading` per sequence, carry mode skill): the sequence's first SOLVE prompt again, with
  a note as its document, clauses from *other* tasks' trajectories: one that names an admissible action
  (sometimes joined with a clause that names none), or, with "several", half the time several naming
  different actions, one of them sharing a word with this task; the target is the action the note names
  for this task.

No target depends on the task's answer: a solve target is a function of the document and the admissible
actions alone, and the notes come from other tasks, so the bin (or command) they name is unrelated to this
task's. What the warm start gives is the behaviour an instruction-tuned model brings ("answer in the tags,
read your notes, quote what happened"); which clause a curate turn should keep is left to RL, and only curate
credit rewards it. The warm-started policy is measured on its own (the "untrained" policy of
`transfer_experiment.py`, benchmarks/): its random-clause documents already name the right bin now and then.

Why reading examples: without them a note naming an action is rare in the examples (a random clause of a
first task), and the tiny model stayed at chance on notes (figures: docs/design.md, "The layers in brief"). Targets end with the tokenizer's end of
sequence token so that generation stops after the closing tag.

Why a decaying learning rate: with a constant one, which clause the model copies swung from checkpoint to
checkpoint, so a fixed step count left some seeds without usable copies and RL with nothing to select.
Cosine decay settles the end of the warm start (figures: docs/results/transfer-r1.md). `check_format` measures what a warm start taught (the trainer prints it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Collection, Sequence

import numpy as np

from skillrise_gym.documents import clauses as document_clauses, words as word_set
from skillrise_gym.prompts import ROLE_CURATE, ROLE_SOLVE, action_answer, reflection_answer, skill_answer


@dataclass(frozen=True)
class Example:
    prompt: str
    target: str  # the whole answer, tags included
    prefix: str = ""  # the answer prefix the policy is given (compact prompts): not a target token
    several: bool = False  # a reading note of several clauses naming different actions, one about the item


#: what the warm start's documents look like: "one" clause (curate targets one trajectory clause, notes one
#: naming clause), or "several" (curate targets keep the previous document and add a clause; solve turns
#: and notes read several rules by the one about the item)
DOCUMENTS = ("one", "several")


def format_examples(env: Any, sequences: int, seed: int = 0, reading: int = 2, documents: str = "one") -> list[Example]:
    """Prompts and format-only targets from `sequences` episodes of a `SequenceEnv`, plus `reading` notes
    examples per episode (see the module docstring); `documents` as `DOCUMENTS` says."""
    if documents not in DOCUMENTS:
        raise ValueError(f"documents must be one of {DOCUMENTS}, got {documents!r}")
    several = documents == "several"
    rng = np.random.default_rng(seed)
    examples: list[Example] = []
    clauses: dict[str, None] = {}  # every distinct trajectory clause seen so far, in order: reading notes
    base = env.unwrapped
    for n in range(sequences):
        obs, info = env.reset(seed=int(rng.integers(2**31)))
        task_ids = list(info["task_ids"])
        done = False
        while not done:
            if int(obs["role"]) == ROLE_SOLVE:
                actions = list(obs["admissible_actions"])
                if not actions:
                    raise ValueError(f"{base.benchmark}: the format warm start needs admissible actions")
                named = named_action(actions, str(obs["skill_document"]), task_context(obs) if several else "")
                choice = named if named is not None else actions[int(rng.integers(len(actions)))]
                target = action_answer(choice)
            else:
                own = trajectory_clauses(base.records[-1].history)
                clauses.update(dict.fromkeys(own))
                if base.carry == "reflect":  # LaMer's reflections: one clause of the attempt, in <remark> tags
                    target = reflection_answer(own[int(rng.integers(len(own)))] if own else "none")
                elif several:
                    target = skill_answer(curated_document(str(obs["skill_document"]), own, rng))
                else:
                    target = skill_answer(own[int(rng.integers(len(own)))] if own else "none")
            examples.append(Example(str(obs["prompt"]), target, str(obs.get("answer_prefix") or "")))
            obs, _reward, done, _truncated, _info = env.step(target)
        if base.carry == "skill":
            examples.extend(reading_examples(env, task_ids, clauses, reading, rng, several=several))
        elif base.carry == "reflect":
            examples.extend(reflection_reading_examples(env, task_ids, clauses, reading, rng))
    return examples


def reflection_reading_examples(env: Any, task_ids: Sequence[str], clauses: Collection[str], count: int,
                                rng: np.random.Generator) -> list[Example]:
    """Carry "reflect" (LaMer's episodes): `count` SOLVE examples of the attempt after a failed one, whose
    reflection is a clause of another task's trajectory naming an admissible action, with that action as the
    target: the reading `reading_examples` teaches for documents, taught for reflections. The failed attempt
    answers no command (it teaches nothing: only the SOLVE example after the reflection is kept)."""
    out: list[Example] = []
    named: dict[str, str] | None = None  # clause -> the action it names, for this task's actions
    for _ in range(count if clauses else 0):
        obs, _ = env.reset(options={"task_ids": list(task_ids)})
        if named is None:
            actions = list(obs["admissible_actions"])
            named = {c: a for c in clauses if (a := named_action(actions, c)) is not None}
        if not named:
            break
        done = False
        while int(obs["role"]) == ROLE_SOLVE and not done:  # the first attempt fails
            obs, _reward, done, _truncated, _info = env.step(action_answer("none"))
        if done:
            break
        note = list(named)[int(rng.integers(len(named)))]
        obs, _reward, done, _truncated, _info = env.step(reflection_answer(note))
        if done:
            break
        out.append(Example(str(obs["prompt"]), action_answer(named[note]), str(obs.get("answer_prefix") or "")))
    return out


def reading_examples(env: Any, task_ids: Sequence[str], clauses: Collection[str], count: int,
                     rng: np.random.Generator, several: bool = True) -> list[Example]:
    """`count` first-task SOLVE examples of the sequence `task_ids` whose document is a note that names
    admissible actions, drawn from `clauses` (distinct clauses of other tasks' trajectories, so unrelated to
    this task's answer), and whose target is the action the note names for this task (`named_action`): the
    target depends on the note and the task's wording alone. Half the notes (where the clauses allow) hold
    several clauses naming different actions, one of them sharing words with the task: reading a document
    of several rules means finding the one about this item."""
    if not clauses or count <= 0:
        return []
    obs, _ = env.reset(options={"task_ids": list(task_ids)})
    actions = list(obs["admissible_actions"])
    context = task_context(obs)
    named = {clause: named_action(actions, clause) for clause in clauses}
    naming = [c for c, action in named.items() if action is not None]
    plain = [c for c, action in named.items() if action is None]
    # clauses about this task: sharing a word with its wording, not counting action words and the words
    # common in the clauses (in more than a quarter of them: "the", "and", ...)
    ignored = {word for action in actions for word in word_set(action)}
    counts: dict[str, int] = {}
    for clause in naming:
        for word in word_set(clause):
            counts[word] = counts.get(word, 0) + 1
    ignored |= {word for word, n in counts.items() if n * 4 > len(naming)}
    about = [c for c in naming if (word_set(c) - ignored) & (word_set(context) - ignored)] if several else []
    out = []
    for _ in range(count if naming else 0):
        note, target, several_rules = None, None, False
        for _attempt in range(4 if about and rng.random() < 0.5 else 0):  # several rules, one about this item
            first = about[int(rng.integers(len(about)))]
            others = [c for c in naming if named[c] != named[first] and c not in about]
            if not others:
                break
            picked = [others[int(i)] for i in rng.choice(len(others), size=min(len(others), 1 + int(rng.integers(2))),
                                                         replace=False)]
            parts = picked + [first]
            parts = [parts[int(i)] for i in rng.permutation(len(parts))]
            candidate = "; ".join(parts)
            if named_action(actions, candidate, context) == named[first]:
                note, target, several_rules = candidate, named[first], True
                break
        if note is None:
            note = naming[int(rng.integers(len(naming)))]
            target = named[note]
            if plain and rng.random() < 0.5:  # notes hold other clauses too
                other = plain[int(rng.integers(len(plain)))]
                longer = f"{note}; {other}" if rng.random() < 0.5 else f"{other}; {note}"
                note = longer if named_action(actions, longer, context if several else "") == target else note
        obs, _ = env.reset(options={"task_ids": list(task_ids), "skill_document": note})
        out.append(Example(str(obs["prompt"]), action_answer(target), str(obs.get("answer_prefix") or ""),
                           several=several_rules))
    return out


def several_reading_examples(env: Any, sequences: int, per_sequence: int, rng: np.random.Generator,
                             pool_sequences: int = 300) -> list[Example]:
    """Only the reading notes of several rules (`reading_examples` with `several`): two or three clauses
    naming different actions, one about the item, the target the action of the one about the item. The
    clauses come from `pool_sequences` played training sequences (first admissible action, empty documents),
    the notes from `sequences` others, `per_sequence` drawn for each (those that come out one-clause are
    dropped). For a reading-only warm start before the format warm start, and for `reading_probe.py`
    (benchmarks/)."""
    clauses: dict[str, None] = {}
    for _ in range(pool_sequences):
        obs, _info = env.reset(seed=int(rng.integers(2**31)))
        done = False
        while not done:
            solve = int(obs["role"]) == ROLE_SOLVE
            answer = action_answer(str(list(obs["admissible_actions"])[0])) if solve else skill_answer("none")
            obs, _r, done, _t, _i = env.step(answer)
            if int(obs.get("role", ROLE_SOLVE)) == ROLE_CURATE and env.records:  # a task just ended
                clauses.update(dict.fromkeys(trajectory_clauses(env.records[-1].history)))
    out: list[Example] = []
    for _ in range(sequences):
        _obs, info = env.reset(seed=int(rng.integers(2**31)))
        out += [e for e in reading_examples(env, info["task_ids"], clauses, per_sequence, rng) if e.several]
    return out


#: the most clauses a warm-start curate target keeps (the oldest are dropped first)
DOCUMENT_CLAUSES = 4


def curated_document(previous: str, clauses: Sequence[str], rng: np.random.Generator,
                     limit: int = DOCUMENT_CLAUSES) -> str:
    """A warm-start CURATE target: the previous document's clauses, kept, plus one clause of the finished
    task's trajectory drawn uniformly (moved last if already there), at most `limit` clauses. Which clause
    is worth adding is not taught: RL's curate credit decides that."""
    kept = [c.strip() for c in previous.split(";") if c.strip() and c.strip().lower() != "none"]
    if clauses:
        added = clauses[int(rng.integers(len(clauses)))]
        kept = [c for c in kept if c != added] + [added]
    return "; ".join(kept[-limit:]) or "none"


def task_context(obs: dict[str, Any]) -> str:
    """What a SOLVE turn knows about its own task, besides its document: the task and the latest
    observation (what `named_action` matches a document's clauses against)."""
    return f"{obs.get('task', '')} {obs.get('observation', '')}"


def trajectory_clauses(history: Sequence[Any]) -> list[str]:
    """The clauses of a task's actions and observations, in order (cut at . , : ; ! ? and newlines)."""
    import re

    text = "\n".join(f"{step.action}\n{step.observation}" for step in history)
    return [c.strip() for c in re.split(r"[.,:;!?\n]+", text) if c.strip()]


def _names(actions: Sequence[str], text: str) -> str | None:
    """The admissible action `text` names: most words in common with it, ignoring words every action has;
    None when it names none (or several tie)."""
    words = [word_set(a) for a in actions]
    shared = set.intersection(*words) if words else set()
    present = word_set(text)
    scores = [len((w - shared) & present) for w in words]
    best = max(scores, default=0)
    if best == 0 or scores.count(best) > 1:
        return None
    return actions[scores.index(best)]


def named_action(actions: Sequence[str], document: str, context: str = "") -> str | None:
    """The admissible action the document names for this task. Each clause of the document (cut at ; . ! ?
    and newlines) names the action it shares most words with (ignoring words every action has; a tie names
    none). When the clauses that name one name different actions, the one about this task decides: the
    clause sharing most words with `context` (the task's own wording), not counting action words and
    words all those clauses have; a tie, or no clause about the task, names nothing (None)."""
    naming = [(c, a) for c in document_clauses(document) if (a := _names(actions, c)) is not None]
    if not naming:
        return None
    if len({a for _, a in naming}) == 1:
        return naming[0][1]
    ignored = {word for action in actions for word in word_set(action)}
    words = [word_set(c) - ignored for c, _ in naming]
    common = set.intersection(*words)
    present = word_set(context) - ignored
    scores = [len((w - common) & present) for w in words]
    best = max(scores)
    winners = {naming[i][1] for i, score in enumerate(scores) if score == best}
    return winners.pop() if best > 0 and len(winners) == 1 else None


@dataclass(frozen=True)
class FormatCheck:
    """What a warm-started policy does greedily on sequences it was not trained on (`check_format`)."""

    follow: float  # SOLVE turns whose note names an admissible action: the share that takes that action
    copy: float  # CURATE turns: the share whose document is clauses of the trajectory, verbatim
    valid: float  # every turn: the share of well-formed answers (tags closed, admissible action)
    sequences: int
    #: notes of several clauses naming different actions (documents "several"): the share that takes the
    #: action of the clause about the item (None: no such note was drawn)
    follow_several: float | None = None

    def passes(self, follow: float, copy: float) -> bool:
        return self.follow >= follow and self.copy >= copy


def check_format(env: Any, answer: Callable[[list[str], list[str]], list[str]], sequences: int = 40,
                 seed: int = 1, documents: str = "one") -> FormatCheck:
    """Play `sequences` episodes of `env` (a `SequenceEnv`, carry mode skill) with `answer` (prompts and
    answer prefixes -> whole answers, greedy), and measure the two behaviours the warm start teaches: copying
    trajectory clauses when curating, and taking the action a note names (one reading note per episode, as
    `reading_examples` builds them). Use seeds the warm start's examples did not come from."""
    from skillrise_gym.prompts import parse_action, parse_skill

    rng = np.random.default_rng([seed, 7919])
    base = env.unwrapped
    clauses: dict[str, None] = {}
    copied = curated = valid = turns = 0
    notes: list[Example] = []
    for _ in range(sequences):
        obs, info = env.reset(seed=int(rng.integers(2**31)))
        task_ids = list(info["task_ids"])
        done = False
        while not done:
            prefix = str(obs.get("answer_prefix") or "")
            text = answer([str(obs["prompt"])], [prefix])[0]
            if int(obs["role"]) == ROLE_SOLVE:
                parsed = parse_action(text, base.benchmark)
                ok = parsed.valid and parsed.action in list(obs["admissible_actions"])
            else:
                own = trajectory_clauses(base.records[-1].history)
                clauses.update(dict.fromkeys(own))
                parsed_skill = parse_skill(text)
                parts = [part.strip() for part in parsed_skill.document.split(";")]
                kept = {part.strip() for part in str(obs["skill_document"]).split(";")}
                ok = parsed_skill.valid
                curated += 1
                # copies: every clause from this trajectory or kept from the previous document
                copied += bool(ok and parts and all(part in own or part in kept for part in parts))
            valid += bool(ok)
            turns += 1
            obs, _reward, done, _truncated, _info = env.step(text)
        notes.extend(reading_examples(env, task_ids, clauses, 1, rng, several=documents == "several"))
    followed = 0
    several = [0, 0]  # notes whose clauses name different actions; followed
    if notes:
        answers = answer([ex.prompt for ex in notes], [ex.prefix for ex in notes])
        for a, ex in zip(answers, notes):
            hit = parse_action(a, base.benchmark).action == parse_action(ex.target, base.benchmark).action
            followed += hit
            if ex.several:
                several[0] += 1
                several[1] += hit
    return FormatCheck(follow=followed / max(1, len(notes)), copy=copied / max(1, curated),
                       valid=valid / max(1, turns), sequences=sequences,
                       follow_several=several[1] / several[0] if several[0] else None)


def greedy_answerer(model: Any, tokenizer: Any, encode_prompt: Callable[[str, str], tuple[list[int], bool]],
                    max_new_tokens: int, batch_size: int = 64,
                    temperature: float = 0.0) -> Callable[[list[str], list[str]], list[str]]:
    """`answer(prompts, prefixes)` for `check_format`: greedy (or sampled at `temperature` > 0), batched (left
    padding), each answer its prefix plus the decoded completion."""
    import torch

    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos

    def answer(prompts: list[str], prefixes: list[str]) -> list[str]:
        device = next(model.parameters()).device
        out: list[str] = []
        for start in range(0, len(prompts), batch_size):
            rows = [encode_prompt(p, pre)[0] for p, pre in zip(prompts[start:start + batch_size],
                                                               prefixes[start:start + batch_size])]
            width = max(len(r) for r in rows)
            ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
            mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
            gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                 eos_token_id=eos, pad_token_id=pad,
                                 **({"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
                                    if temperature > 0 else {"do_sample": False}))
            out.extend(pre + tokenizer.decode(g[width:], skip_special_tokens=True)
                       for pre, g in zip(prefixes[start:start + batch_size], gen))
        return out

    return answer


def warm_start(
    model: Any,
    tokenizer: Any,
    encode_prompt: Callable[[str, str], tuple[list[int], bool]],
    examples: Sequence[Example],
    steps: int,
    batch_size: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> list[float]:
    """Cross-entropy on the target tokens only (prompts encoded as the policy sees them), AdamW with a
    short warm-up and cosine decay to a tenth of `lr`; returns the losses. `progress` (e.g. print) gets a
    line about every tenth of the steps: step, mean loss since the last line, seconds per step, time left."""
    import time

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
    # a short linear warm-up, then cosine decay to a tenth: the last steps settle instead of jumping between
    # which clause the model copies (with a constant rate, copying swung 0.2 <-> 1.0 between checkpoints)
    warmup = max(1, steps // 20)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda n: min(1.0, (n + 1) / warmup) * (
        0.1 + 0.45 * (1.0 + math.cos(math.pi * min(1.0, n / max(1, steps - 1))))))
    rng = np.random.default_rng(seed)
    device = next(model.parameters()).device
    was_training = model.training
    model.train()
    losses = []
    every = max(1, steps // 10)
    started = time.perf_counter()
    for step in range(steps):
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
        scheduler.step()
        losses.append(float(out.loss.detach()))
        if progress is not None and ((step + 1) % every == 0 or step + 1 == steps):
            spent = time.perf_counter() - started
            recent = losses[-every:]
            progress(f"warm start step {step + 1}/{steps}: loss {sum(recent) / len(recent):.3f}, "
                     f"{spent / (step + 1):.1f} s/step, about {spent / (step + 1) * (steps - step - 1):.0f} s left")
    model.train(was_training)
    return losses
