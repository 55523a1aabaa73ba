"""Rollouts: S sequences x G trials per step, played on a fixed pool of N SequenceEnvs (an `EnvPool`, or a
`RayEnvPool` with a Ray address: `skillrise_gym.pools`).

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
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from skillrise_gym.agents.base import stable_seed
from skillrise_gym.env import SequenceEnv
from skillrise_gym.episode import EpisodeSpec
from skillrise_gym.pools import WorkerError, env_fn, make_pool, unpack
from skillrise_gym.records import turn_from_step
from skillrise_gym.sequences import SequenceSampler, TaskSequence
from skillrise_train.algorithms import algorithm
from skillrise_train.credit import anchor_key
from skillrise_train.distributed import Ranks, shard
from skillrise_train.pacing import Pacer, Progress
from skillrise_train.rollout_setup import RolloutConfig, pool_size, training_episode
from skillrise_train.samples import Completion, GenerateFn, RolloutResult, TrialPlan, TurnSample, lockstep_order

logger = logging.getLogger("skillrise_train")

# Offsets that keep evaluation draws apart from training draws of the same seed.
EVAL_SEED_OFFSET = 1_000_003


@dataclass
class _Schedule:
    """One rollout's bookkeeping: the trial each env is playing, and the trials waiting for an env."""

    plans: list[TrialPlan]
    queue: deque[int]  # indices into plans, in the order they will start
    attempts: list[int]  # plays started so far, per plan
    slots: dict[int, int] = field(default_factory=dict)  # env index -> index into plans of the trial it plays
    turns: dict[int, int] = field(default_factory=dict)  # index into plans -> turns its current play has taken
    step: int = 0  # the training step (seeds resets and sampling)
    observations: dict[int, dict[str, Any]] = field(default_factory=dict)  # env index -> its trial's latest

    def trial(self, env_index: int) -> TrialPlan:
        return self.plans[self.slots[env_index]]


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
        """Play every planned trial to its end on the pool's envs, a waiting trial starting on whichever env
        frees up: in rounds (every trial in play generated together, then every env stepped), or with
        `overlap` as the trials become ready (see "Overlap" in the module docstring)."""
        result = RolloutResult(samples=[], task_rewards={}, success={}, plans=list(plans))
        for plan in plans:
            result.task_rewards[plan.trial_id] = [0.0] * len(plan.task_ids)
        schedule = _Schedule(list(plans), deque(range(len(plans))), [0] * len(plans), step=step)
        progress = Progress(self.progress, step, len(plans))
        if self.config.overlap:
            self._play_overlapped(schedule, generate, result, progress)
        else:
            self._play_lockstep(schedule, generate, result, progress)
        return lockstep_order(result)

    def _play_lockstep(self, schedule: _Schedule, generate: GenerateFn, result: RolloutResult,
                       progress: Progress) -> None:
        """Rounds: the prompts of every trial in play in one generation (in calls of `generation_batch`),
        then every env stepped, waiting for the slowest."""
        started = time.perf_counter()
        self._start(schedule, result)
        result.env_seconds += time.perf_counter() - started
        while schedule.slots:
            live = sorted(schedule.slots, key=schedule.slots.__getitem__)  # envs, in their trials' plan order
            prompts = [schedule.observations[i]["prompt"] for i in live]
            started = time.perf_counter()
            completions: list[Completion] = []
            for start in range(0, len(live), self.config.generation_batch):
                completions.extend(self._generate(generate, schedule, live[start:start + self.config.generation_batch]))
            result.generation_seconds += time.perf_counter() - started

            started = time.perf_counter()
            # the trials on a lost worker start again (below); the others go on
            outcomes, lost = self._pool_call(schedule, self.pool.step_many,
                                             {i: c.text for i, c in zip(live, completions)})
            result.env_seconds += time.perf_counter() - started
            for index, completion, prompt in zip(live, completions, prompts):
                if index not in lost:
                    self._record(schedule, index, prompt, completion, outcomes[index], result)
            started = time.perf_counter()
            if lost:
                self._requeue(lost, schedule, result)
            self._start(schedule, result)
            result.env_seconds += time.perf_counter() - started
            progress.tick(schedule, result)

    def _play_overlapped(self, schedule: _Schedule, generate: GenerateFn, result: RolloutResult,
                         progress: Progress) -> None:
        """As the trials become ready: envs step (in their workers or actors) while the model generates for
        other trials. When trials wait for the model and envs are still busy, `Pacer` decides between a
        call now and waiting for the busy ones to join it."""
        pool = self.pool
        if pool.workers == 0 and not self._warned_in_process:
            self._warned_in_process = True
            logger.warning("overlap without env workers or Ray: envs in this process step while nothing else "
                           "runs, so nothing overlaps (set env_workers or ray_address)")
        pacer = Pacer(self.config.overlap_wait)
        waiting: dict[int, float] = {}  # env -> since when its trial waits for the model
        sent: dict[int, float] = {}  # env -> when its pending command was sent
        asked: dict[int, tuple[str, Completion]] = {}  # env -> the prompt and completion it is stepping
        started = time.perf_counter()
        sent.update(dict.fromkeys(self._submit_starts(schedule), started))
        result.env_seconds += time.perf_counter() - started
        while schedule.slots or schedule.queue:
            started = time.perf_counter()
            # how long to wait for replies: the pacer's (None: nothing waits for the model, so block for an env)
            replies, lost = self._pool_call(schedule, pool.receive, pacer.wait(waiting, sent)) if sent else ({}, set())
            now = time.perf_counter()
            for index, reply in sorted(replies.items()):
                pacer.answered(now - sent.pop(index))
                if index in asked:  # a step
                    prompt, completion = asked.pop(index)
                    if self._record(schedule, index, prompt, completion, reply, result):
                        waiting[index] = now
                else:  # a reset
                    self._started(schedule, index, reply, result)
                    if index in schedule.slots:
                        waiting[index] = now
            if lost:
                for index in lost:
                    waiting.pop(index, None)
                    asked.pop(index, None)
                    sent.pop(index, None)
                self._requeue(lost, schedule, result)
            sent.update(dict.fromkeys(self._submit_starts(schedule), time.perf_counter()))
            result.env_seconds += time.perf_counter() - started
            if not waiting or (sent and pacer.wait(waiting, sent) != 0.0):
                continue
            ready = sorted(waiting, key=schedule.slots.__getitem__)  # in plan order
            for start in range(0, len(ready), self.config.generation_batch):
                chunk = ready[start:start + self.config.generation_batch]
                began = time.perf_counter()
                completions = self._generate(generate, schedule, chunk)
                pacer.generated(len(chunk), time.perf_counter() - began)
                result.generation_seconds += time.perf_counter() - began
                began = time.perf_counter()
                for index, completion in zip(chunk, completions):
                    waiting.pop(index)
                    asked[index] = (schedule.observations[index]["prompt"], completion)
                    sent[index] = began
                pool.submit_steps({i: c.text for i, c in zip(chunk, completions)})  # they step while the next chunk generates
                result.env_seconds += time.perf_counter() - began
            progress.tick(schedule, result)

    def _generate(self, generate: GenerateFn, schedule: _Schedule, envs: list[int]) -> list[Completion]:
        """One generation call for the trials of these envs, each prompt with its turn's seed (the same for a
        replayed trial's turn)."""
        observations = [schedule.observations[i] for i in envs]
        seeds = [stable_seed(self.config.seed, schedule.step, schedule.trial(i).trial_id, "turn",
                             schedule.turns[schedule.slots[i]]) for i in envs]
        return generate([o["prompt"] for o in observations], [str(o.get("answer_prefix") or "") for o in observations],
                        seeds)

    def _record(self, schedule: _Schedule, index: int, prompt: str, completion: Completion,
                outcome: tuple[Any, ...], result: RolloutResult) -> bool:
        """Record env `index`'s step (the turn, its credit tag and tokens); True while its trial goes on,
        False when it ended (its env is then free for the next trial)."""
        plan = schedule.trial(index)
        schedule.turns[schedule.slots[index]] += 1
        obs, reward, terminated, truncated, info = outcome
        position = int(info["position"])
        role = info["role"]
        if role == "solve":
            result.task_rewards[plan.trial_id][position] += float(reward) * self.config.success_reward
        turn = turn_from_step(
            prompt=prompt, response=completion.text, reward=reward, info=info,
            sequence_id=plan.sequence.id, trial_id=plan.trial_id, benchmark=plan.sequence.tasks[0].benchmark,
            prompt_tokens=len(completion.prompt_ids), completion_tokens=len(completion.completion_ids),
            position_offset=plan.position_offset,
            extra={"step": schedule.step, "group_id": plan.group_id, "prompt_truncated": completion.prompt_truncated,
                   "completion_cut": completion.cut},
        )
        seen = schedule.observations[index]  # what the turn was asked from: GiGPO's anchor state
        result.samples.append(TurnSample(turn, completion.prompt_ids, completion.completion_ids,
                                         completion.sampler_logps, anchor_key(seen) if role == "solve" else None))
        result.completion_tokens += len(completion.completion_ids)
        result.prompt_tokens += len(completion.prompt_ids)
        result.truncated_prompts += int(completion.prompt_truncated)
        if terminated or truncated:
            summary = info.get("summary") or {}
            result.success[plan.trial_id] = [bool(s) for s in summary.get("success", [])]
            del schedule.slots[index]  # the env takes the next trial
            schedule.observations.pop(index)
            return False
        schedule.observations[index] = obs
        return True

    def _start(self, schedule: _Schedule, result: RolloutResult) -> None:
        """Start waiting trials on every free env, in env order: reset to their sequence's start (the same
        reset seed every time, whichever env plays it). An env whose trial has nothing to play (its tasks
        failed to load) takes the next one; the trials of an env worker lost meanwhile wait again."""
        while True:
            requests = self._assign(schedule)
            if not requests:
                return
            replies, lost = self._pool_call(schedule, self.pool.reset_many, requests)
            for index, reply in sorted(replies.items()):
                self._started(schedule, index, reply, result)
            if lost:
                self._requeue(lost, schedule, result)

    def _submit_starts(self, schedule: _Schedule) -> list[int]:
        """`_start` without waiting: the resets of the trials that can start now are sent (to these envs);
        their replies come with the steps' (`_started`)."""
        requests = self._assign(schedule)
        if requests:
            self.pool.submit_resets(requests)
        return list(requests)

    def _assign(self, schedule: _Schedule) -> dict[int, tuple[int, dict[str, Any]]]:
        """Give the next waiting trials to the free envs (in env order): their reset requests."""
        free = [i for i in range(self.pool.num_envs) if i not in schedule.slots]
        requests = {}
        for index in free[: len(schedule.queue)]:
            trial = schedule.queue.popleft()
            schedule.slots[index] = trial
            schedule.turns[trial] = 0
            schedule.attempts[trial] += 1
            plan = schedule.plans[trial]
            requests[index] = (_reset_seed(self.config.seed, schedule.step, plan.trial_id), {"task_ids": plan.task_ids})
        return requests

    def _started(self, schedule: _Schedule, index: int, reply: tuple[Any, Any], result: RolloutResult) -> None:
        """A trial's reset came back: its first observation, or (its tasks failed to load: nothing to
        generate) its result, and the env is free again."""
        obs, info = reply
        if info.get("sequence_done"):
            result.success[schedule.trial(index).trial_id] = [bool(s) for s in info["summary"]["success"]]
            del schedule.slots[index]
        else:
            schedule.observations[index] = obs

    @staticmethod
    def _pool_call(schedule: _Schedule, call: Callable[..., dict[int, Any]], *args: Any
                   ) -> tuple[dict[int, Any], set[int]]:
        """`call(*args)` on the pool: (the replies that came, the envs whose worker was lost). A lost
        worker loses every env it holds, also the ones this call did not ask anything of (a trial
        mid-episode, while another env of that worker was being reset)."""
        try:
            return call(*args), set()
        except WorkerError as exc:
            playing = [schedule.trial(i).trial_id for i in exc.indices if i in schedule.slots]
            logger.warning("%s; restarting trial(s) %s", exc, playing)
            return unpack(exc.replies), set(exc.indices)

    def _requeue(self, lost: set[int], schedule: _Schedule, result: RolloutResult) -> None:
        """Trials whose env worker died or hung: their turns so far are dropped and they wait again, first in
        line, to play from the start on the next free env, up to `max_attempts` plays in all; after that they
        are dropped from this rollout with the reason in `result.dropped` (their group trains on the trials
        that finished)."""
        again = []
        for index in sorted(lost):
            if index not in schedule.slots:  # an env without a trial (it ended, or none was waiting)
                continue
            trial = schedule.slots.pop(index)
            schedule.observations.pop(index, None)
            plan = schedule.plans[trial]
            result.samples = [s for s in result.samples if s.turn.trial_id != plan.trial_id]
            result.success.pop(plan.trial_id, None)
            if schedule.attempts[trial] >= self.config.max_attempts:
                result.task_rewards.pop(plan.trial_id, None)
                result.dropped[plan.trial_id] = f"its env worker died or hung {schedule.attempts[trial]} times"
                logger.warning("dropping trial %s from this rollout: %s", plan.trial_id, result.dropped[plan.trial_id])
                continue
            result.task_rewards[plan.trial_id] = [0.0] * len(plan.task_ids)
            result.replayed += 1
            again.append(trial)
        schedule.queue.extendleft(sorted(again, reverse=True))


