"""Credit assignment and group-relative advantages of SkillRise, in plain numpy, top to bottom.

Vocabulary:
- a *trial* is one play-through of a sequence of K tasks; G trials of the same sequence form a *group*;
- a *turn* is one model call of a trial: SOLVE (an engine command for task `position`) or CURATE (the new
  skill document written after task `position`);
- r_i is the reward of task i in a trial: `success_reward` if solved, else 0.

1. Returns (one number per turn; no within-task discounting, as in the reference):
     solve turn of task i:         r_i
     curate turn after task i:     sum_{j>i} gamma^(j-i) r_j      (K=3: 0.6 r_1 + 0.36 r_2 after task 0)
   The curate credit is selectable (`CURATE_CREDITS`), for ablations:
     future (SkillRise, the default):  the discounted sum of LATER tasks' rewards, above;
     own (the coupled ablation):       r_i, the reward of the task the document was written after;
     none:                             curate turns are generated but not trained (`trained_turns` drops
                                       them; their returns are still computed, for the record).
2. Group statistics: the key of a turn is (group, position, role). Each trial contributes ONE value per key
   (its return), however many turns it took there, so long attempts do not weigh more in the mean.
   A key with a single trial has mean 0 and std 1 (the reference's convention).
3. Advantage of a turn:
     mean_norm:      return - mean_key
     mean_std_norm:  (return - mean_key) / (std_key + eps)      (std unbiased, as torch.std)
   minus `invalid_penalty` when the turn's output lacked its <action>/<skill> tags. (`--overlong-penalty`,
   for a turn cut off at --max-new-tokens, is subtracted after this, for every algorithm alike, by
   `algorithms.Algorithm.credit`.)

GiGPO (`gigpo_advantages`, the baseline of Feng et al. 2025, "Group-in-Group Policy Optimization"; its
public implementation is verl-agent's `gigpo` estimator), over the same single-task episodes as GRPO:
     A(turn) = A_episode + w * A_step
   A_episode: the GRPO advantage above (the task's return r against the group of G trials of that task);
   A_step:    the turn's discounted step return  R_t = sum_{s>=t} step_gamma^(s-t) * r^step_s  (r^step_s: the
              reward of step s, `success_reward` on the succeeding step), normalised within its *anchor
              group*: the turns of the same task group whose state key is identical (the observation text
              and the admissible actions shown), each turn one member (a trial that comes back to a state
              counts again, as in verl-agent). A state no other turn shares is a group of one: A_step = 0.
   Both use the same mode (mean_norm / mean_std_norm, std unbiased, a group of one has std 1).
   Where ours differs from verl-agent: its episode mean and std run over step rows (a long trajectory
   weighs more); ours over trials, as for SkillRise and GRPO. The penalty for invalid turns is subtracted
   once, after both parts.

LaMer (`lamer_credit`, the baseline of Jiang et al. 2025, "Meta-RL Induces Exploration in Language Agents";
public code: mlbio-epfl/LaMer, `credit_assignment` in agent_system/multi_turn_rollout/metarl_rollout_loop.py).
A trial is N = K attempts at ONE task (mode repeat), each attempt after the first preceded by a reflection
turn (role curate, carry "reflect") on the failed one; a solved attempt ends the trial (the env's
`end_on_success`), so attempts after it have r = 0. With r_n the reward of attempt n (0 when not played):
     solve turn of attempt n:            G_n = sum_{m>=n} gamma^(m-n) r_m     (= r_n + gamma G_{n+1})
     reflection written after attempt n: G_{n+1} = sum_{m>n} gamma^(m-n-1) r_m (the next attempt's return)
   (the paper's cross-attempt return with gamma = its gamma_traj, 0.6 by default in its code, and no
   within-attempt discounting: every solve turn of an attempt gets the attempt's return, as ours do.)
   Advantages: the same group-relative step as SkillRise, per (group, attempt, role), one value per trial.
   Where ours differs from LaMer's code: it adds GiGPO's step-level term (turns grouped by identical
   observation, across attempts) to an episode term normalised over every attempt of the task together,
   and it discounts later attempts by step_gamma over the steps left in the current one as well. Ours keeps
   SkillRise's normaliser, so a comparison of the two isolates what is credited and what crosses tasks.

Two conscious differences from the reference (spec section 4.3): the penalty is subtracted after
normalisation instead of being folded into the score first (under mean_std_norm a group of equal returns
has std 0, and a folded-in penalty would be divided by eps), and the per-trial group value is the trial's
return, not the penalised score of an arbitrary representative turn. Under mean_norm with no invalid turns
both give the same numbers as the reference.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Sequence

import numpy as np

from skillrise_gym.prompts import ROLES
from skillrise_gym.records import Turn

SOLVE, CURATE = ROLES
CURATE_CREDITS = ("future", "own", "none")


@dataclass(frozen=True)
class TurnTag:
    """What credit assignment needs to know about one turn."""

    trial: Hashable  # one id per trial
    group: Hashable  # trials of the same sequence share it
    role: str  # "solve" or "curate"
    position: int  # task position; for curate, the task just finished
    format_valid: bool = True
    step: int = 0  # the turn's index among its task's solve steps (GiGPO's step returns)
    reward: float = 0.0  # the reward this step earned, scaled like task rewards (GiGPO)
    anchor: Hashable = None  # the state the turn acted in (GiGPO's anchor groups): observation, admissible

    @classmethod
    def of(cls, turn: Turn, position_offset: int = 0, success_reward: float = 1.0, anchor: Hashable = None) -> "TurnTag":
        """Credit's view of a recorded turn (`records.Turn`, made by the rollout): its trial and group (the
        trainer records the group in ``extra["group_id"]``), its position within the trial's own task list
        (the record's position less the episode's `position_offset`), and for a solve turn its step reward
        scaled by `success_reward` and the state it acted in (`anchor`, from `anchor_key`)."""
        solve = turn.role == SOLVE
        return cls(trial=turn.trial_id, group=turn.extra["group_id"], role=turn.role,
                   position=turn.position - position_offset, format_valid=turn.format_valid, step=turn.step_index,
                   reward=float(turn.reward) * success_reward if solve else 0.0, anchor=anchor if solve else None)


def anchor_key(observation: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """The state a solve turn acted in, as GiGPO groups it: the engine's observation text and the admissible
    actions shown (empty where the env lists none). Never the prompt: it holds the trial's own history, the
    skill document and the step count, which differ between trials in the same state."""
    return str(observation.get("observation", "")), tuple(observation.get("admissible_actions") or ())


def curate_return(task_rewards: Sequence[float], position: int, gamma: float) -> float:
    """sum_{j>position} gamma^(j-position) * r_j: what the document written after `position` led to."""
    return float(sum(gamma ** (j - position) * task_rewards[j] for j in range(position + 1, len(task_rewards))))


def check_curate_credit(curate_credit: str) -> str:
    if curate_credit not in CURATE_CREDITS:
        raise ValueError(f"unknown curate credit {curate_credit!r}; known: {', '.join(CURATE_CREDITS)}")
    return curate_credit


def turn_returns(tags: Sequence[TurnTag], task_rewards: Mapping[Hashable, Sequence[float]], gamma: float,
                 curate_credit: str = "future") -> np.ndarray:
    """The return of every turn (step 1). `task_rewards[trial]` lists r_0..r_{K-1} of that trial."""
    check_curate_credit(curate_credit)
    returns = np.zeros(len(tags), dtype=np.float64)
    for n, tag in enumerate(tags):
        rewards = task_rewards[tag.trial]
        if tag.role == SOLVE:
            returns[n] = rewards[tag.position]
        elif tag.role == CURATE and curate_credit == "own":
            returns[n] = rewards[tag.position]
        elif tag.role == CURATE:
            returns[n] = curate_return(rewards, tag.position, gamma)
        else:
            raise ValueError(f"unknown role {tag.role!r}")
    return returns


def group_statistics(
    tags: Sequence[TurnTag], returns: np.ndarray
) -> dict[tuple[Hashable, int, str], tuple[float, float, int]]:
    """(mean, std, number of trials) per key (group, position, role), one value per trial (step 2)."""
    per_key: dict[tuple[Hashable, int, str], dict[Hashable, float]] = defaultdict(dict)
    for tag, value in zip(tags, returns):
        # every turn of a trial under one key has the same return, so keeping the first loses nothing
        per_key[(tag.group, tag.position, tag.role)].setdefault(tag.trial, float(value))
    stats = {}
    for key, by_trial in per_key.items():
        values = np.array(list(by_trial.values()), dtype=np.float64)
        if len(values) == 1:
            stats[key] = (0.0, 1.0, 1)
        else:
            stats[key] = (float(values.mean()), float(values.std(ddof=1)), len(values))
    return stats


def advantages(
    tags: Sequence[TurnTag],
    returns: np.ndarray,
    mode: str = "mean_norm",
    invalid_penalty: float = 0.0,
    eps: float = 1e-6,
) -> np.ndarray:
    """Group-relative advantage of every turn (step 3)."""
    stats = group_statistics(tags, returns)
    out = np.zeros(len(tags), dtype=np.float64)
    for n, (tag, value) in enumerate(zip(tags, returns)):
        mean, std, _count = stats[(tag.group, tag.position, tag.role)]
        if mode == "mean_norm":
            out[n] = value - mean
        elif mode == "mean_std_norm":
            out[n] = (value - mean) / (std + eps)
        else:
            raise ValueError(f"unknown advantage mode {mode!r}")
        if not tag.format_valid:
            out[n] -= invalid_penalty
    return out


def step_returns(tags: Sequence[TurnTag], step_gamma: float) -> np.ndarray:
    """R_t = r_t + step_gamma * R_{t+1} over each trial's solve turns of one task, in step order (GiGPO);
    0 for curate turns."""
    if not 0.0 <= step_gamma <= 1.0:
        raise ValueError(f"step_gamma must be in [0, 1], got {step_gamma}")
    by_task: dict[tuple[Hashable, int], list[int]] = defaultdict(list)
    for n, tag in enumerate(tags):
        if tag.role == SOLVE:
            by_task[(tag.trial, tag.position)].append(n)
    out = np.zeros(len(tags), dtype=np.float64)
    for indices in by_task.values():
        running = 0.0
        for n in sorted(indices, key=lambda i: tags[i].step, reverse=True):
            running = float(tags[n].reward) + step_gamma * running
            out[n] = running
    return out


def anchor_groups(tags: Sequence[TurnTag]) -> dict[tuple[Hashable, int, Hashable], list[int]]:
    """Solve turns by (task group, position, anchor state): GiGPO's step-level groups."""
    groups: dict[tuple[Hashable, int, Hashable], list[int]] = defaultdict(list)
    for n, tag in enumerate(tags):
        if tag.role == SOLVE:
            groups[(tag.group, tag.position, tag.anchor)].append(n)
    return groups


def gigpo_advantages(
    tags: Sequence[TurnTag],
    task_rewards: Mapping[Hashable, Sequence[float]],
    step_gamma: float = 0.95,
    step_weight: float = 1.0,
    mode: str = "mean_norm",
    invalid_penalty: float = 0.5,
    eps: float = 1e-6,
) -> tuple[np.ndarray, np.ndarray]:
    """(episode returns, advantages) of GiGPO: the GRPO episode advantage plus `step_weight` times the
    step advantage over anchor groups (module docstring)."""
    returns = turn_returns(tags, task_rewards, gamma=0.0)  # solve turns: their task's return
    episode = advantages(tags, returns, mode=mode, invalid_penalty=0.0, eps=eps)
    stepwise = step_returns(tags, step_gamma)
    step_adv = np.zeros(len(tags), dtype=np.float64)
    for indices in anchor_groups(tags).values():
        values = stepwise[indices]
        mean = float(values.mean())
        std = float(values.std(ddof=1)) if len(values) > 1 else 1.0
        step_adv[indices] = (values - mean) if mode == "mean_norm" else (values - mean) / (std + eps)
    out = episode + step_weight * step_adv
    out -= invalid_penalty * np.array([not tag.format_valid for tag in tags], dtype=np.float64)
    return returns, out


def lamer_returns(tags: Sequence[TurnTag], task_rewards: Mapping[Hashable, Sequence[float]],
                  gamma: float) -> np.ndarray:
    """LaMer's cross-attempt returns (module docstring): G_n for a solve turn of attempt n, G_{n+1} for the
    reflection written after attempt n. `task_rewards[trial]` lists r_0..r_{N-1}, 0 for attempts not played."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    attempt_returns: dict[Hashable, list[float]] = {}
    for trial, rewards in task_rewards.items():
        running, out = 0.0, [0.0] * (len(rewards) + 1)  # out[N] = 0: nothing after the last attempt
        for n in range(len(rewards) - 1, -1, -1):
            running = float(rewards[n]) + gamma * running
            out[n] = running
        attempt_returns[trial] = out
    returns = np.zeros(len(tags), dtype=np.float64)
    for n, tag in enumerate(tags):
        by_attempt = attempt_returns[tag.trial]
        if tag.role == SOLVE:
            returns[n] = by_attempt[tag.position]
        elif tag.role == CURATE:
            returns[n] = by_attempt[tag.position + 1]
        else:
            raise ValueError(f"unknown role {tag.role!r}")
    return returns


def lamer_credit(
    tags: Sequence[TurnTag],
    task_rewards: Mapping[Hashable, Sequence[float]],
    gamma: float = 0.6,
    mode: str = "mean_norm",
    invalid_penalty: float = 0.5,
) -> tuple[np.ndarray, np.ndarray]:
    """Returns and advantages of every turn of LaMer's attempts (module docstring)."""
    returns = lamer_returns(tags, task_rewards, gamma)
    return returns, advantages(tags, returns, mode=mode, invalid_penalty=invalid_penalty)


def trained_turns(tags: Sequence[TurnTag], curate_credit: str = "future") -> list[int]:
    """Indices of the turns that enter the loss (every turn, but no curate turn under curate credit "none")."""
    check_curate_credit(curate_credit)
    return [n for n, tag in enumerate(tags) if not (curate_credit == "none" and tag.role == CURATE)]


def assign_credit(
    tags: Sequence[TurnTag],
    task_rewards: Mapping[Hashable, Sequence[float]],
    gamma: float = 0.6,
    mode: str = "mean_norm",
    invalid_penalty: float = 0.5,
    curate_credit: str = "future",
) -> tuple[np.ndarray, np.ndarray]:
    """Returns and advantages of every turn: the whole of SkillRise's credit assignment."""
    returns = turn_returns(tags, task_rewards, gamma, curate_credit)
    return returns, advantages(tags, returns, mode=mode, invalid_penalty=invalid_penalty)
