"""What a rollout produces: the model's completions, the planned trials, the recorded turns with their token
ids, the whole result (in the order a lockstep rollout records it, however it was played), and its per-step
statistics. Plain data: the engine that plays rollouts is `rollout.py`, credit is `credit.py`."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

from skillrise_gym.backends import backend_class
from skillrise_gym.documents import document_stats, repeats_a_clause
from skillrise_gym.prompts import parse_skill
from skillrise_gym.records import Turn
from skillrise_gym.sequences import TaskSequence
from skillrise_train.credit import TurnTag, anchor_groups


@dataclass
class Completion:
    """One model call: the prompt tokens it saw, the tokens it produced and their text."""

    prompt_ids: list[int]
    completion_ids: list[int]
    text: str
    prompt_truncated: bool = False
    #: each completion token's log-prob under the distribution that drew it, where a reduced-precision copy
    #: of the policy sampled (`--generation-dtype`); None: the policy itself did
    sampler_logps: list[float] | None = None
    #: the completion ran to the token budget (--max-new-tokens) without ending: cut off mid-answer
    cut: bool = False


#: (prompts, answer prefixes, seeds) -> completions whose text starts with the prefix. A seed per prompt,
#: from the trial and its turn: a generator that samples each prompt from an RNG of that seed (the
#: trainer's, on HF generate) draws the same tokens whatever the batch (see "Determinism")
GenerateFn = Callable[[list[str], list[str], list[int]], list[Completion]]


@dataclass
class TrialPlan:
    """One trial: which tasks it plays and which trials it is compared with (any free env plays it)."""

    trial_id: str
    group_id: str  # trials compared with each other share it
    sequence: TaskSequence
    task_ids: list[str]  # the tasks this env episode plays
    position_offset: int = 0  # position of task_ids[0] in `sequence` (GRPO: each task is its own episode)
    sequence_index: int = 0  # the sequence's index among the step's S (which rank plays it: distributed.shard)


def repeats(turn: Turn) -> bool:
    """Whether a curate turn's document states one clause twice (`skillrise_gym.documents.repeats_a_clause`)."""
    return turn.role == "curate" and repeats_a_clause(parse_skill(turn.response or "").document)


@dataclass
class TurnSample:
    """A recorded turn plus what training needs besides the record: its token ids, the sampler's log-probs
    and the state it acted in (GiGPO's anchor: `credit.anchor_key`, for solve turns)."""

    turn: Turn
    prompt_ids: list[int]
    completion_ids: list[int]
    sampler_logps: list[float] | None = None  # Completion.sampler_logps
    anchor: Hashable = None


@dataclass
class RolloutResult:
    """Everything one rollout produced."""

    samples: list[TurnSample]
    task_rewards: dict[str, list[float]]  # trial_id -> r_0..r_{K-1} (for GRPO: keyed per task episode)
    success: dict[str, list[bool]]  # trial_id -> per-position success of the trial's episode
    plans: list[TrialPlan]
    generation_seconds: float = 0.0
    env_seconds: float = 0.0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    truncated_prompts: int = 0
    replayed: int = 0  # trial restarts after an env worker died or hung
    dropped: dict[str, str] = field(default_factory=dict)  # trial_id -> why it was left out of this rollout

    def position_success(self, K: int) -> list[float]:
        """Success rate of each task position of the sequences (over trials; GRPO: over task episodes)."""
        hits, counts = [0.0] * K, [0] * K
        for plan in self.plans:
            for offset, solved in enumerate(self.success.get(plan.trial_id, [])):
                pos = plan.position_offset + offset
                hits[pos] += float(solved)
                counts[pos] += 1
        return [h / c if c else 0.0 for h, c in zip(hits, counts)]

    def tags(self, success_reward: float = 1.0) -> list[TurnTag]:
        """Credit's view of every turn (`credit.TurnTag.of`), positions counted within the trial's own task
        list (a GRPO trial plays one task of its sequence) and step rewards scaled by `success_reward`."""
        offsets = {plan.trial_id: plan.position_offset for plan in self.plans}
        return [TurnTag.of(s.turn, offsets[s.turn.trial_id], success_reward, s.anchor) for s in self.samples]


def lockstep_order(result: RolloutResult) -> RolloutResult:
    """The result with its samples in the order a lockstep rollout (one env per trial) records them: every
    trial's first turn in plan order, then every trial's second...; and its per-trial dicts in plan order.
    So the rows TRL gets (its mini-batch split, the packing's ties) do not depend on the pool's size."""
    order = {plan.trial_id: n for n, plan in enumerate(result.plans)}
    turns_so_far: dict[str, int] = defaultdict(int)
    keys = []
    for sample in result.samples:  # a trial's samples are appended in the order it played them
        keys.append((turns_so_far[sample.turn.trial_id], order[sample.turn.trial_id]))
        turns_so_far[sample.turn.trial_id] += 1
    result.samples = [sample for _key, sample in sorted(zip(keys, result.samples), key=lambda pair: pair[0])]
    for name in ("task_rewards", "success"):
        by_trial = getattr(result, name)
        setattr(result, name, {p.trial_id: by_trial[p.trial_id] for p in result.plans if p.trial_id in by_trial})
    return result


def merge_results(parts: Sequence[RolloutResult], plans: Sequence[TrialPlan]) -> RolloutResult:
    """One rollout from the parts several processes played of `plans` (each part from `RolloutEngine.mine`),
    as one process would have recorded it: samples in lockstep order over all plans. Token counts add up;
    the seconds are the slowest process's (they ran at the same time)."""
    if len(parts) == 1:
        return parts[0]
    merged = RolloutResult(samples=[s for p in parts for s in p.samples], task_rewards={}, success={},
                           plans=list(plans))
    for part in parts:
        merged.task_rewards.update(part.task_rewards)
        merged.success.update(part.success)
        merged.dropped.update(part.dropped)
        merged.completion_tokens += part.completion_tokens
        merged.prompt_tokens += part.prompt_tokens
        merged.truncated_prompts += part.truncated_prompts
        merged.replayed += part.replayed
    merged.generation_seconds = max(p.generation_seconds for p in parts)
    merged.env_seconds = max(p.env_seconds for p in parts)
    return lockstep_order(merged)


def rollout_stats(result: RolloutResult, advantages: Sequence[float], K: int) -> dict[str, float]:
    """Per-step numbers for the metrics log: per-position success, advantages by role, token counts."""
    stats: dict[str, float] = {}
    for pos, rate in enumerate(result.position_success(K)):
        stats[f"success/pos{pos}"] = rate
    successes = [s for v in result.success.values() for s in v]
    stats["success/mean"] = sum(successes) / len(successes) if successes else 0.0
    by_role: dict[str, list[float]] = defaultdict(list)
    for sample, adv in zip(result.samples, advantages):
        by_role[sample.turn.role].append(float(adv))
    for role in ("solve", "curate"):
        values = by_role.get(role, [])
        stats[f"advantage/{role}_mean"] = sum(values) / len(values) if values else 0.0
        stats[f"advantage/{role}_abs"] = sum(abs(v) for v in values) / len(values) if values else 0.0
        stats[f"turns/{role}"] = float(len(values))
    valid = [s.turn.format_valid for s in result.samples]
    stats["format_valid"] = sum(valid) / len(valid) if valid else 0.0
    for role in ("solve", "curate"):  # completions cut off at --max-new-tokens (documents that outgrow it)
        cut = [bool(s.turn.extra.get("completion_cut")) for s in result.samples if s.turn.role == role]
        stats[f"cut/{role}"] = sum(cut) / len(cut) if cut else 0.0
    curated = [s.turn for s in result.samples if s.turn.role == "curate"]
    if curated:  # documents stating a clause twice (--repetition-penalty)
        stats["repeats/curate"] = sum(repeats(t) for t in curated) / len(curated)
    stats["tokens/completion"] = float(result.completion_tokens)
    stats["tokens/prompt"] = float(result.prompt_tokens)
    stats["prompts_truncated"] = float(result.truncated_prompts)
    stats["time/generation_s"] = result.generation_seconds
    stats["time/env_s"] = result.env_seconds
    groups = [len(g) for g in anchor_groups(result.tags()).values()]
    solve = sum(groups)
    # how often states repeat across trials of a task (what GiGPO's step-level groups can use)
    stats["anchor/mean_group_size"] = solve / len(groups) if groups else 0.0
    stats["anchor/repeated_share"] = sum(g for g in groups if g > 1) / solve if solve else 0.0
    stats["trials/replayed"] = float(result.replayed)
    stats["trials/dropped"] = float(len(result.dropped))
    # what the curated documents hold (benchmarks whose tasks say what they reveal: the transfer probe)
    tasks = {task.id: task for plan in result.plans for task in plan.sequence.tasks}
    held = document_stats([sample.turn for sample in result.samples], tasks.get, backend_class)
    for name in ("states_all", "states_latest", "keeps_earlier", "instance_words", "reads_own_rule"):
        if name in held:
            stats[f"documents/{name}"] = held[name]
    return stats
