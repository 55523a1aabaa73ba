"""The training algorithms, one object each: what episode a trial plays, how a step's sequences become trials,
how the trials' turns are credited, which turns enter the loss, and which settings it refuses.

`Algorithm` is the base: what every algorithm must say (its name and help, its episodes and credit rule) and
what they share (the trial plan, the overlong penalty after the credit rule, the trained turns, the refusal
of `--G 1`, which leaves every group-relative advantage zero). The algorithms:

    skillrise  (`SkillRise`) a trial plays a whole sequence of K tasks, solving and curating the skill
               document; solve turns: their task's reward; curate turns: the discounted later rewards
               (`--curate-credit` own / none: the ablations). G trials per sequence form a group.
    grpo       the same S sequences, but each task is its own one-task episode (no document, no curate turn),
               G trials per task: the same S*G*K tasks as SkillRise, without the carried document.
    gigpo      grpo's episodes; advantages add a step-level term over repeated states (anchor groups).
    lamer      a trial is K attempts at ONE task, a reflection after each failed attempt, ending at the first
               success; LaMer's cross-attempt return.

The math lives in `credit.py` (one function per algorithm, proven by hand in tests/test_train_credit.py and
tests/test_train_lamer.py); the rollout engine plays what `plan` returns in the envs `episode` describes.
Adding an algorithm: a subclass of `Algorithm` here (its name, help, `episode` and `credit_rule`; the other
attributes where the defaults do not fit) and an entry in `ALGORITHMS` (its flag choices, the trainer and the
evaluation read them from it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np

from skillrise_gym.records import Turn
from skillrise_gym.sequences import TaskSequence
from skillrise_train import credit
from skillrise_train.samples import RolloutResult, TrialPlan, repeats


class Algorithm(ABC):
    """What every training algorithm says; the concrete ones are the subclasses below (`ALGORITHMS`)."""

    #: its `--algo` name
    name: str
    #: its part of `--algo`'s help
    help: str
    #: a trial plays a whole sequence (else one task of it)
    whole_sequences: bool = True
    #: its curate turns write skill documents (the warm start's check measures what it taught them)
    writes_skills: bool = False
    #: its between-task turns write reflections (carry "reflect"): its warm start teaches reflections
    reflects: bool = False
    #: its advantages are relative to the group of G trials (so `check` refuses G = 1)
    group_relative: bool = True

    @abstractmethod
    def episode(self, K: int) -> dict[str, Any]:
        """The `SequenceEnv` settings of one training (and evaluation) episode."""

    def trials_per_sequence(self, K: int, G: int) -> int:
        return G if self.whole_sequences else K * G

    def plan(self, sequences: Sequence[TaskSequence], G: int, tag: str) -> list[TrialPlan]:
        """The trials of a draw, in the order they start: G per sequence, or (one task per trial) G per task
        of a sequence. Trial ids hold the sequence's index in the draw, so they are unique across processes
        (and with them the per-turn sampling seeds)."""
        plans: list[TrialPlan] = []
        for s, sequence in enumerate(sequences):
            ids = [t.id for t in sequence.tasks]
            if self.whole_sequences:
                for g in range(G):
                    plans.append(TrialPlan(f"{tag}/s{s}/g{g}", f"{tag}/s{s}", sequence, ids, sequence_index=s))
            else:
                for j, task_id in enumerate(ids):
                    for g in range(G):
                        plans.append(TrialPlan(f"{tag}/s{s}/t{j}/g{g}", f"{tag}/s{s}/t{j}", sequence, [task_id], j,
                                               sequence_index=s))
        return plans

    def credit(self, result: RolloutResult, config: Any) -> tuple[np.ndarray, np.ndarray]:
        """(returns, advantages) of every turn of `result`, in its order: the algorithm's `credit_rule`, then
        `--overlong-penalty` subtracted from the advantage of every turn whose completion was cut off at
        --max-new-tokens (``extra["completion_cut"]``), and `--repetition-penalty` from every curate turn whose
        document states a clause twice (`repeats`), after the rule like the format penalty: every algorithm
        alike. `config`: a TrainConfig (gamma, advantage_mode, invalid_penalty, overlong_penalty,
        curate_credit, success_reward, GiGPO's step_gamma and step_advantage_weight)."""
        returns, advantages = self.credit_rule(result, config)
        if config.overlong_penalty:
            advantages = advantages - config.overlong_penalty * np.array(
                [bool(s.turn.extra.get("completion_cut")) for s in result.samples], dtype=np.float64)
        if getattr(config, "repetition_penalty", 0.0):
            advantages = advantages - config.repetition_penalty * np.array(
                [repeats(s.turn) for s in result.samples], dtype=np.float64)
        return returns, advantages

    @abstractmethod
    def credit_rule(self, result: RolloutResult, config: Any) -> tuple[np.ndarray, np.ndarray]:
        """(returns, advantages) of every turn of `result` by this algorithm's own rule (one `credit.py`
        function); `credit` is what callers use."""

    def trained_turns(self, turns: Sequence[Turn], config: Any) -> list[int]:
        """Indices of the turns that enter the loss (curate credit "none": solve turns only)."""
        return credit.trained_turns(turns, config.curate_credit)

    def check(self, config: Any) -> None:
        """Raise ValueError for settings this algorithm cannot use (the CLI prints it, exit 2). Here: a group of
        one trial where advantages are group-relative (G < 1 is TrainConfig's own refusal). A subclass that
        refuses more calls this one too."""
        if self.group_relative and config.G == 1:
            raise ValueError("--G must be at least 2: group-relative advantages of a group of one are zero, so no "
                             "turn would be trained; use --G 2 or more")


class SkillRise(Algorithm):
    """SkillRise: whole sequences, solve and curate turns, the curate credit the config chooses."""

    name = "skillrise"
    help = "skillrise (solve, then curate a skill document)"
    writes_skills = True

    def episode(self, K: int) -> dict[str, Any]:
        return {"K": K, "mode": "cross"}

    def credit_rule(self, result: RolloutResult, config: Any) -> tuple[np.ndarray, np.ndarray]:
        return credit.assign_credit(result.tags(config.success_reward), result.task_rewards, gamma=config.gamma,
                                    mode=config.advantage_mode, invalid_penalty=config.invalid_penalty,
                                    curate_credit=config.curate_credit)


class GRPO(Algorithm):
    """GRPO: each task of a sequence its own one-task episode, credited with its task's reward."""

    name = "grpo"
    help = "grpo (each task its own episode, no document)"
    whole_sequences = False

    def episode(self, K: int) -> dict[str, Any]:
        return {"K": 1, "mode": "cross"}

    def credit_rule(self, result: RolloutResult, config: Any) -> tuple[np.ndarray, np.ndarray]:
        # SkillRise's rule on one-task episodes: solve turns only, their task's reward
        return SkillRise.credit_rule(self, result, config)


class GiGPO(GRPO):
    name = "gigpo"
    help = "gigpo (grpo plus step-level advantages)"

    def credit_rule(self, result: RolloutResult, config: Any) -> tuple[np.ndarray, np.ndarray]:
        return credit.gigpo_advantages(result.tags(config.success_reward), result.task_rewards,
                                       step_gamma=config.step_gamma, step_weight=config.step_advantage_weight,
                                       mode=config.advantage_mode, invalid_penalty=config.invalid_penalty)


class LaMer(Algorithm):
    name = "lamer"
    help = "lamer (K attempts at one task with reflections)"
    reflects = True  # it writes reflections, not skill documents

    def episode(self, K: int) -> dict[str, Any]:
        return {"K": K, "mode": "repeat", "carry": "reflect", "end_on_success": True}

    def credit_rule(self, result: RolloutResult, config: Any) -> tuple[np.ndarray, np.ndarray]:
        return credit.lamer_credit(result.tags(config.success_reward), result.task_rewards, gamma=config.gamma,
                                   mode=config.advantage_mode, invalid_penalty=config.invalid_penalty)

    def check(self, config: Any) -> None:
        from skillrise_gym import prompts
        from skillrise_gym.backends import backend_class

        super().check(config)
        if config.K < 2:
            raise ValueError(f"--algo lamer plays K attempts at one task, reflecting between them: K must be at "
                             f"least 2, got {config.K}")
        if config.curate_credit != "future":
            raise ValueError("--curate-credit applies to SkillRise's curate turns; --algo lamer credits its "
                             f"reflections with the next attempt's return (credit.py): drop --curate-credit "
                             f"{config.curate_credit}")
        if not prompts.profile(backend_class(config.env).benchmark).reflect:
            raise ValueError(f"--algo lamer needs a reflect prompt, and {config.env} has none")
        if config.warmstart_steps and config.warmstart_documents != "one":
            raise ValueError("--warmstart-documents several builds skill documents; LaMer's reflections are one "
                             "clause each: drop --warmstart-documents with --algo lamer")


#: every algorithm by its `--algo` name
ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (SkillRise(), GRPO(), GiGPO(), LaMer())}


def algorithm(name: str) -> Algorithm:
    """The algorithm called `name` (ValueError naming the known ones)."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"algo must be one of {tuple(ALGORITHMS)}, got {name!r}") from None


def algorithm_for(config: Any) -> Algorithm:
    """The algorithm of a TrainConfig (`config.algo`)."""
    return algorithm(config.algo)
