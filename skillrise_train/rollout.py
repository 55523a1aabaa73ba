"""Rollouts: S sequences x G trials per step, played on a fixed pool of N SequenceEnvs (an `EnvPool`, or a
`RayEnvPool` with a Ray address: `skillrise_gym.pools`) by `skillrise_gym.player.Player`, the loop the bench
plays with too (free envs, queue, resets, replays after a lost worker); this module keeps what is the
trainer's own: the plans, the per-turn sampling seeds, the records with their credit tags.

Two ways to play, the same turns (`overlap`):
- Lockstep rounds (default): every trial in play contributes its current prompt; all prompts go to the
  model in batched generation calls (TRL's generation path: HF generate on CPU, vLLM on GPUs); every
  completion is stepped in its env, waiting for the slowest env, and the next round begins.
- Overlapped (`overlap=True`): each trial goes on as soon as its env answers. Completions are sent to the
  envs without waiting (`EnvPool.submit_steps`: they step in their worker processes or Ray actors while the
  model generates for other trials), and a generation call takes the trials that wait for the model. When
  some envs are still busy, `Pacer` weighs one more call's fixed overhead against the time they are
  expected to take, both estimated during the rollout: a GPU server's calls cost little beyond their
  prompts, so trials rarely wait for each other there; HF generate on a CPU costs seconds a call, so its
  rounds stay whole; a slow env holds the others back at most `overlap_wait` seconds. Envs in this process
  (no workers, no Ray) cannot step during a call: overlapped then plays as lockstep (a warning says so).
Every model call becomes one tagged `Turn` (skillrise_gym.records).

Envs are reused across trials, as the bench runner reuses them across sequences: the pool holds N envs
(`envs`, at most the trials of a step), so memory grows with N, not with S x G (for ScienceWorld, one JVM
of about 1.2 GB per env). Trials wait in plan order; an env whose trial ended (or whose worker was lost)
takes the next one, reset with that trial's own seed (`_reset_seed(seed, step, trial_id)`) and task ids.

Determinism. What a trial sees depends only on its reset and its own answers, never on the env it runs on,
on the other trials or on timing, and samples come back in the order of a lockstep rollout (every trial's
first turn, then every trial's second...). Each turn is generated with a seed of its own,
`stable_seed(seed, step, trial_id, "turn", n)` (the same again when a lost trial is replayed), and the
trainer's generation samples each prompt from an RNG of that seed (`skillrise_train/sampling.py`, on HF
generate's path), so which prompts share a generation call changes nothing: the same seed gives the same
turns, rewards, credit and rows for every N, lockstep or overlapped, however the calls were timed (tested
with N = 1, 3 and one env per trial, a generator of random latency, and the real policy sampling at
temperature 1), up to the floating-point effects of batch size and padding on the scores (a near-tie can
flip, as for greedy decoding). Exceptions: vLLM, whose path through TRL takes no per-request seed (its
tokens depend on their batch-mates: a lockstep run is then reproducible for one N and
`generation_batch`, an overlapped one only in distribution); and WebShop's `search[<r>]` (random
results), which draws from an RNG shared by the envs of a process.

What a trial plays (a whole sequence, one of its tasks, or K attempts at one task) and how a step's
sequences become trials is the algorithm's (`algorithms.py`); the G trials of a group are pinned to the same
task ids with ``reset(options={"task_ids": ...})``. GRPO's trials play each task of the same S sequences as
its own one-task episode, so a step attempts exactly the same S*G*K tasks as SkillRise, and the only
difference is the carried document and its credit (independent K=1 episodes also let the tasks run in
parallel, as many at once as there are envs, as the reference's baseline does with N=24 = 8 x 3 envs).
The data a rollout produces (`Completion`, `TrialPlan`, `TurnSample`, `RolloutResult`, `rollout_stats`)
lives in `samples.py`; splits and the pool's size in `rollout_setup.py`.
"""

from __future__ import annotations

import logging
import time
import zlib
from typing import Any, Callable, Sequence

from skillrise_gym.agents.base import stable_seed
from skillrise_gym.env import SequenceEnv
from skillrise_gym.episode import EpisodeSpec
from skillrise_gym.player import Player, Trial
from skillrise_gym.pools import env_fn, make_pool
from skillrise_gym.records import turn_from_step
from skillrise_gym.sequences import SequenceSampler, TaskSequence
from skillrise_train.algorithms import algorithm
from skillrise_train.credit import anchor_key
from skillrise_train.distributed import Ranks, shard
from skillrise_train.pacing import Progress
from skillrise_train.rollout_setup import RolloutConfig, pool_size, training_episode
from skillrise_train.samples import Completion, GenerateFn, RolloutResult, TrialPlan, TurnSample, lockstep_order

logger = logging.getLogger("skillrise_train")

# Offsets that keep evaluation draws apart from training draws of the same seed.
EVAL_SEED_OFFSET = 1_000_003


def _reset_seed(*parts: Any) -> int:
    """A stable 31-bit seed from parts (Python's hash() is salted per process)."""
    return zlib.crc32(repr(parts).encode()) & 0x7FFFFFFF


class RolloutEngine:
    """Owns the env pool and the sequence sampler of one split; plays rollouts with a generate function.
    `config`: what to play (`rollout_setup.RolloutConfig`); `ranks`: this process among the training
    processes (it plays its `shard` of each step's sequences)."""

    def __init__(self, config: RolloutConfig, ranks: Ranks | None = None) -> None:
        self.config = config
        self.ranks = ranks or Ranks(0, 1)
        self.algorithm = algorithm(config.algo)
        self._warned_in_process = False
        #: the episode every trial plays (`RolloutConfig.spec`: made once, by the algorithm, for the trainer)
        self.spec = config.spec
        catalog = SequenceEnv(backend=config.env, K=config.K, split=self.spec.split, mode=self.spec.mode,
                              family=self.spec.family, backend_options=dict(self.spec.backend_options))
        try:  # the sampler lives in this process: it only needs the task list, never an engine episode
            self.sampler: SequenceSampler = catalog.sampler()
        finally:  # the task list is all it gives: no engine it started to read one (a ScienceWorld JVM reading
            catalog.close()  # the splits on a first run) stays up beside the pool's N
        #: the step's sequences this process plays (their indices among the S; all of them on one process)
        self.shard = shard(config.S, self.ranks)
        #: trials of one step on this process: one per sequence and group member (GRPO: per task, too)
        self.trials_per_step = len(self.shard) * self.algorithm.trials_per_sequence(config.K, config.G)
        #: the SequenceEnv settings of every env that plays this rollout's episodes (the pool's, `sequence_env`)
        self.env_settings = self.spec.env_kwargs()
        fn = env_fn(config.env, **self.env_settings)
        # N envs serve every trial of a step (play); with env workers or Ray actors, a worker that dies or
        # does not answer in the pool's timeout is replaced
        self.pool = make_pool([fn] * pool_size(config.envs, self.trials_per_step, config.env), config.pool)
        #: called with a one-line report every PROGRESS_SECONDS of a rollout (the CLI prints it), or None
        self.progress: Callable[[str], None] | None = None
        #: the progress line is rewritten after every round (a terminal) instead of every 30 s (a log)
        self.live_progress = False
        self.last_rollout_s: float | None = None  # the previous rollout's seconds: the next one's ETA

    @classmethod
    def from_train_config(cls, config: Any, episode: EpisodeSpec | None = None, ranks: Ranks | None = None
                          ) -> "RolloutEngine":
        """The engine of a `TrainConfig` playing `episode` (default: `training_episode` with the backend's
        prompt style; the trainer passes the one it made for its model)."""
        return cls(RolloutConfig.from_train(config, episode or training_episode(config, None)), ranks)

    def close(self) -> None:
        self.pool.close()

    def sequence_env(self) -> SequenceEnv:
        """A new env playing this rollout's episodes (what each env of the pool is), for callers that play
        outside the pool (the trainer's warm start and its check); the caller closes it."""
        return SequenceEnv(backend=self.config.env, **self.env_settings)

    # ------------------------------------------------------------------ planning
    def sequences(self, index: int, n: int, seed_offset: int = 0) -> list[TaskSequence]:
        """The n sequences of draw `index` (a training step, or the fixed evaluation draw): the same on every
        process (each plays its `shard` of them)."""
        return [self.sampler.sequence(self.config.seed + seed_offset, index * n + s) for s in range(n)]

    def plan(self, sequences: Sequence[TaskSequence], tag: str) -> list[TrialPlan]:
        """The trials of a draw, in the order they start (`Algorithm.plan`); `mine` picks this process's."""
        return self.algorithm.plan(sequences, self.config.G, tag)

    def mine(self, plans: Sequence[TrialPlan]) -> list[TrialPlan]:
        """The plans of the sequences this process plays (`distributed.shard`; all of them on one process)."""
        return [p for p in plans if p.sequence_index % self.ranks.world_size == self.ranks.rank]

    # ------------------------------------------------------------------ playing
    def play(self, plans: Sequence[TrialPlan], generate: GenerateFn, step: int = 0) -> RolloutResult:
        """Play every planned trial to its end on the pool's envs (`skillrise_gym.player.Player`: the loop the
        bench plays with too), a waiting trial starting on whichever env frees up: in rounds, or with
        `overlap` as the trials become ready (see "Overlap" in the module docstring). Each turn is sampled
        with its own seed; what a turn becomes (its record, credit tag and tokens) is `_record`'s."""
        result = RolloutResult(samples=[], task_rewards={}, success={}, plans=list(plans))
        for plan in plans:
            result.task_rewards[plan.trial_id] = [0.0] * len(plan.task_ids)
        if self.config.overlap and self.pool.workers == 0 and not self._warned_in_process:
            self._warned_in_process = True
            logger.warning("overlap without env workers or Ray: envs in this process step while nothing else "
                           "runs, so nothing overlaps (set env_workers or ray_address)")
        trials = [Trial(n, list(plan.task_ids), _reset_seed(self.config.seed, step, plan.trial_id), plan.trial_id,
                        key=plan) for n, plan in enumerate(plans)]
        player = Player(self.pool, max_attempts=self.config.max_attempts, batch=self.config.generation_batch,
                        overlap=self.config.overlap, overlap_wait=self.config.overlap_wait, log=logger.warning)
        progress = Progress(self.progress, step, len(plans), live=self.live_progress, expected_s=self.last_rollout_s)
        began = time.perf_counter()

        def act(chunk: list[Trial]) -> list[Completion]:
            # the same seed for a turn however it is batched, and again when a lost trial is replayed
            observations = [t.observation or {} for t in chunk]
            seeds = [stable_seed(self.config.seed, step, t.key.trial_id, "turn", t.turns) for t in chunk]
            return generate([o["prompt"] for o in observations],
                            [str(o.get("answer_prefix") or "") for o in observations], seeds)

        def ended(trial: Trial, info: dict[str, Any]) -> None:
            result.success[trial.key.trial_id] = [bool(s) for s in (info.get("summary") or {}).get("success", [])]

        def lost(trial: Trial, replay: bool, reason: str) -> None:
            # its turns so far are dropped; it plays again from the start, or (attempts spent) it is dropped from
            # this rollout with the reason in `result.dropped` (its group trains on the trials that finished)
            plan = trial.key
            result.samples = [s for s in result.samples if s.turn.trial_id != plan.trial_id]
            result.success.pop(plan.trial_id, None)
            if replay:
                result.task_rewards[plan.trial_id] = [0.0] * len(plan.task_ids)
                result.replayed += 1
                return
            result.task_rewards.pop(plan.trial_id, None)
            result.dropped[plan.trial_id] = reason
            logger.warning("dropping trial %s from this rollout: %s", plan.trial_id, reason)

        stats = player.play(trials, act, lambda trial, seen, completion, reply:
                            self._record(trial, seen, completion, reply, result, step),
                            ended, on_lost=lost, on_round=lambda: progress.tick(player, result))
        result.generation_seconds += stats.act_seconds
        result.env_seconds += stats.env_seconds
        self.last_rollout_s = time.perf_counter() - began
        return lockstep_order(result)

    def _record(self, trial: Trial, seen: dict[str, Any], completion: Completion, outcome: tuple[Any, ...],
                result: RolloutResult, step: int) -> None:
        """One step of a trial: its turn (from the observation `seen` it was asked from), credit tag and tokens."""
        plan: TrialPlan = trial.key
        obs, reward, terminated, truncated, info = outcome
        position = int(info["position"])
        role = info["role"]
        if role == "solve":
            result.task_rewards[plan.trial_id][position] += float(reward) * self.config.success_reward
        turn = turn_from_step(
            prompt=seen["prompt"], response=completion.text, reward=reward, info=info,
            sequence_id=plan.sequence.id, trial_id=plan.trial_id, benchmark=plan.sequence.tasks[0].benchmark,
            prompt_tokens=len(completion.prompt_ids), completion_tokens=len(completion.completion_ids),
            position_offset=plan.position_offset,
            extra={"step": step, "group_id": plan.group_id, "prompt_truncated": completion.prompt_truncated,
                   "completion_cut": completion.cut},
        )
        # what the turn was asked from: GiGPO's anchor state
        result.samples.append(TurnSample(turn, completion.prompt_ids, completion.completion_ids,
                                         completion.sampler_logps, anchor_key(seen) if role == "solve" else None))
        result.completion_tokens += len(completion.completion_ids)
        result.prompt_tokens += len(completion.prompt_ids)
        result.truncated_prompts += int(completion.prompt_truncated)
