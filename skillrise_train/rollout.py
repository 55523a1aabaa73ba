"""Rollouts: S sequences x G trials per step, played on a fixed pool of N SequenceEnvs (an `EnvPool`, or a
`RayEnvPool` with `ray_address`).

Two ways to play, the same turns (`overlap`):
- Lockstep rounds (default): every trial in play contributes its current prompt; all prompts go to the
  model in batched generation calls (TRL's generation path: HF generate on CPU, vLLM on GPUs); every
  completion is stepped in its env, waiting for the slowest env, and the next round begins.
- Overlapped (`overlap=True`): each trial goes on as soon as its env answers. Completions are sent to the
  envs without waiting (`EnvPool.submit_steps`: they step in their worker processes or Ray actors while the
  model generates for other trials), and a generation call takes the trials that wait for the model. When
  some envs are still busy, `_Pacer` weighs one more call's fixed overhead against the time they are
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

SkillRise (`algo="skillrise"`): trial = one SequenceEnv episode of K tasks with solve and curate turns; the G
trials of a sequence are pinned to the same task ids with ``reset(options={"task_ids": ...})``.

GRPO baseline (`algo="grpo"`): the same S sequences are drawn, but each of their K tasks is played as its own
single-task episode (a SequenceEnv with K=1: no skill document is ever written, no curate turn), G trials per
task. So a step attempts exactly the same S*G*K tasks as SkillRise, and the only difference is the carried
skill document and its credit. (Suppressing the document inside a K-task env would still play tasks one
after another within a trial; independent K=1 episodes make the tasks independent and let them run in
parallel, as many at once as there are envs, as the reference's baseline does with N=24 = 8 x 3 envs.)
"""

from __future__ import annotations

import logging
import math
import os
import time
import zlib
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from skillrise_gym.agents.base import stable_seed
from skillrise_gym.backends import backend_class
from skillrise_gym.documents import document_stats
from skillrise_gym.env import SequenceEnv
from skillrise_gym.records import Turn, turn_from_step
from skillrise_gym.sequences import SequenceSampler, TaskSequence
from skillrise_gym.vector import EnvPool, WorkerError, env_fn, make_pool
from skillrise_train.config import OVERLAP_WAIT
from skillrise_train.credit import TurnTag, anchor_groups
from skillrise_train.distributed import Ranks, shard

logger = logging.getLogger("skillrise_train")

# Offsets that keep evaluation draws apart from training draws of the same seed.
EVAL_SEED_OFFSET = 1_000_003
#: a rollout longer than this reports its progress every this many seconds (`RolloutEngine.progress`)
PROGRESS_SECONDS = 30.0


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


@dataclass
class TurnSample:
    """A recorded turn plus what training needs: its credit tag and token ids."""

    turn: Turn
    tag: TurnTag
    prompt_ids: list[int]
    completion_ids: list[int]
    sampler_logps: list[float] | None = None  # Completion.sampler_logps


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


HELD_OUT_SPLITS = ("eval_in_distribution", "test", "eval", "dev")


def default_splits(env: str) -> tuple[str, str]:
    """(train split, held-out split) of a backend: "train", and the reference's evaluation split
    (ALFWorld eval_in_distribution, WebShop test = goals 0-499, ScienceWorld test)."""
    splits = backend_class(env).splits
    train = "train" if "train" in splits else splits[0]
    held_out = next((s for s in HELD_OUT_SPLITS if s in splits and s != train), None)
    return train, held_out or next((s for s in splits if s != train), train)


def _reset_seed(*parts: Any) -> int:
    """A stable 31-bit seed from parts (Python's hash() is salted per process)."""
    return zlib.crc32(repr(parts).encode()) & 0x7FFFFFFF


def pool_size(envs: int, trials: int, env: str) -> int:
    """How many envs serve a step of `trials` trials: `envs`, or with 0 as many as the memory holds: one per
    trial, except for a backend whose envs hold memory of their own (`Backend.env_memory`: ScienceWorld's
    JVMs), no more than the available memory holds; never more than the trials. CPUs do not bound it:
    envs step one at a time in a process anyway (`env_workers` decides the parallelism), and fewer envs
    than trials means smaller generation batches, the dominant cost."""
    if envs < 0:
        raise ValueError(f"envs must be >= 0 (0 sizes the env pool to the memory), got {envs}")
    if envs:
        return min(envs, trials)
    size = trials
    per_env = backend_class(env).env_memory
    available = available_memory()
    if per_env and available is not None:
        size = min(size, available // per_env)
    return max(1, size)


def available_memory() -> int | None:
    """Bytes of memory available to new processes (MemAvailable of /proc/meminfo, else the free physical
    pages), or None where the system says neither."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


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


class _Progress:
    """Reports a long rollout's state every `PROGRESS_SECONDS` to `report` (the CLI prints it)."""

    def __init__(self, report: Callable[[str], None] | None, step: int, trials: int) -> None:
        self.report, self.step, self.trials = report, step, trials
        self.began = self.last = time.perf_counter()
        self.rounds = 0

    def tick(self, schedule: _Schedule, result: RolloutResult) -> None:
        """One round (one generation pass) done."""
        self.rounds += 1
        if self.report is None or not schedule.slots or time.perf_counter() - self.last < PROGRESS_SECONDS:
            return
        self.last = time.perf_counter()
        unfinished = len(schedule.slots) + len(schedule.queue)
        self.report(
            f"  rollout of step {self.step + 1}: {self.rounds} rounds, {len(result.samples)} turns, "
            f"{self.trials - unfinished}/{self.trials} trials done, {self.last - self.began:.0f} s "
            f"(generation {result.generation_seconds:.0f} s, envs {result.env_seconds:.0f} s)")


class _Pacer:
    """When an overlapped rollout calls the model, while some trials wait for it and some envs are busy.

    Waiting for the busy envs merges two calls into one, saving one call's fixed overhead; calling now lets
    the busy envs step during the call (and the waiting trials' envs during the next one), hiding env time
    behind generation. So: call now once the busy envs are expected to take longer than that overhead and
    at least half the trials in play wait (two groups that alternate, rather than many small calls);
    otherwise wait for the busy ones, never longer than `cap` seconds after the first trial began to wait (a
    slow env does not hold back the others). A GPU server's calls cost little beyond their prompts, so
    trials there go in two alternating groups when env steps are slow enough to hide (ALFWorld) and in
    whole rounds when they are not (WebShop); HF generate on a CPU costs seconds a call: whole rounds.

    Estimates, from this rollout: an env's answer time (from sending a command to its reply: the mean of the
    latest `WINDOW`) and a call's overhead (the intercept of a least-squares line of call seconds over
    batch size; until two sizes were seen, the fastest call, an upper bound; before any call, unknown:
    wait for every env, up to `cap`)."""

    WINDOW = 64

    def __init__(self, cap: float) -> None:
        self.cap = cap
        self.answers: deque[float] = deque(maxlen=self.WINDOW)
        self.calls: deque[tuple[int, float]] = deque(maxlen=self.WINDOW)

    def answered(self, seconds: float) -> None:
        self.answers.append(seconds)

    def generated(self, batch: int, seconds: float) -> None:
        self.calls.append((batch, seconds))

    def overhead(self) -> float:
        if not self.calls:
            return math.inf
        sizes = [b for b, _ in self.calls]
        times = [t for _, t in self.calls]
        if len(set(sizes)) < 2:
            return min(times)
        mb, mt = sum(sizes) / len(sizes), sum(times) / len(times)
        slope = sum((b - mb) * (t - mt) for b, t in self.calls) / sum((b - mb) ** 2 for b in sizes)
        return min(max(0.0, mt - slope * mb), min(times))

    def wait(self, waiting: dict[int, float], busy: dict[int, float]) -> float | None:
        """Seconds to wait for env replies before calling the model for the `waiting` trials (env -> since
        when), with `busy` envs (env -> when their command was sent): 0.0 calls now; None (nothing waits)
        waits for the next reply however long."""
        if not waiting:
            return None
        if not busy:
            return 0.0
        now = time.perf_counter()
        left = self.cap - (now - min(waiting.values()))
        if left <= 0:
            return 0.0
        if not self.answers:
            return left
        expected = sum(self.answers) / len(self.answers)
        remaining = max(expected - (now - sent) for sent in busy.values())
        if remaining > self.overhead() and 2 * len(waiting) >= len(waiting) + len(busy):
            return 0.0
        return min(left, max(remaining, 0.0) + 0.1 * expected)


#: algorithms whose trials play whole sequences (the others play one task per trial)
SEQUENCE_ALGOS = ("skillrise", "lamer")


def episode_settings(algo: str, K: int) -> dict[str, Any]:
    """The `SequenceEnv` settings of one training episode: K tasks of a family with curated documents
    (skillrise); K attempts at one task, a reflection after each failed one, ending at the first success
    (lamer); one task (grpo, gigpo)."""
    if algo == "lamer":
        return {"K": K, "mode": "repeat", "carry": "reflect", "end_on_success": True}
    return {"K": K if algo in SEQUENCE_ALGOS else 1, "mode": "cross"}


class RolloutEngine:
    """Owns the env pool and the sequence sampler of one split; plays rollouts with a generate function."""

    def __init__(
        self,
        env: str,
        algo: str,
        K: int,
        G: int,
        S: int,
        split: str,
        max_task_steps: int,
        success_reward: float = 10.0,
        seed: int = 0,
        workers: int = 0,
        backend_options: dict[str, Any] | None = None,
        generation_batch: int = 64,
        rank: int = 0,
        world_size: int = 1,
        prompt_style: str | None = None,
        env_timeout: float | None = None,
        max_attempts: int = 2,
        envs: int = 0,
        ray_address: str | None = None,
        ray_num_cpus: float | None = None,
        ray_memory: float | None = None,
        overlap: bool = False,
        overlap_wait: float = OVERLAP_WAIT,
    ) -> None:
        if not (math.isfinite(overlap_wait) and overlap_wait >= 0):
            raise ValueError(f"overlap_wait must be a number of seconds >= 0, got {overlap_wait!r}")
        self.overlap, self.overlap_wait = overlap, overlap_wait
        self._warned_in_process = False
        self.env, self.algo, self.K, self.G, self.S = env, algo, K, G, S
        self.max_attempts = max_attempts
        self.split, self.seed, self.success_reward = split, seed, success_reward
        self.generation_batch = generation_batch
        self.rank, self.world_size = rank, world_size
        options = dict(backend_options or {})
        self.backend_options = options
        # The sampler lives in this process: it only needs the task list, never an engine episode.
        #: what an episode is: K tasks of a family (skillrise), K attempts at one task with reflections between
        #: them, ending at the first success (lamer), or one task (grpo, gigpo)
        self.episode = episode_settings(algo, K)
        catalog = SequenceEnv(backend=env, K=K, split=split, mode=self.episode["mode"], backend_options=options)
        try:
            self.sampler: SequenceSampler = catalog.sampler()
        finally:  # the task list is all it gives: no engine it started to read one (a ScienceWorld JVM reading
            catalog.close()  # the splits on a first run) stays up beside the pool's N
        #: the step's sequences this process plays (their indices among the S; all of them on one process)
        self.shard = shard(S, Ranks(rank, world_size))
        #: trials of one step on this process: one per sequence and group member (GRPO: per task, too)
        self.trials_per_step = len(self.shard) * (G if self.whole_sequences else K * G)
        self.prompt_style = prompt_style
        fn = env_fn(env, split=split, max_task_steps=max_task_steps, backend_options=options,
                    prompt_style=prompt_style, **self.episode)
        # N envs serve every trial of a step (play); with env workers or Ray actors, a worker that dies or
        # does not answer in env_timeout s is replaced
        size = pool_size(envs, self.trials_per_step, env)
        self.pool = make_pool([fn] * size, workers=workers, timeout=env_timeout if workers or ray_address else None,
                              ray_address=ray_address, ray_num_cpus=ray_num_cpus, ray_memory=ray_memory)
        #: called with a one-line report every PROGRESS_SECONDS of a rollout (the CLI prints it), or None
        self.progress: Callable[[str], None] | None = None

    def close(self) -> None:
        self.pool.close()

    @property
    def whole_sequences(self) -> bool:
        """Whether a trial plays a whole sequence (skillrise, lamer) rather than one of its tasks (grpo, gigpo)."""
        return self.algo in SEQUENCE_ALGOS

    # ------------------------------------------------------------------ planning
    def sequences(self, index: int, n: int, seed_offset: int = 0) -> list[TaskSequence]:
        """The n sequences of draw `index` (a training step, or the fixed evaluation draw): the same on every
        process (each plays its `shard` of them)."""
        return [self.sampler.sequence(self.seed + seed_offset, index * n + s) for s in range(n)]

    def plan(self, sequences: Sequence[TaskSequence], tag: str) -> list[TrialPlan]:
        """The trials of a draw, in the order they start: G per sequence (SkillRise) or per task of a
        sequence (GRPO). Trial ids hold the sequence's index in the draw, so they are unique across
        processes (and with them the per-turn sampling seeds); `mine` picks this process's."""
        plans: list[TrialPlan] = []
        for s, sequence in enumerate(sequences):
            ids = [t.id for t in sequence.tasks]
            if self.whole_sequences:
                for g in range(self.G):
                    plans.append(TrialPlan(f"{tag}/s{s}/g{g}", f"{tag}/s{s}", sequence, ids, sequence_index=s))
            else:
                for j, task_id in enumerate(ids):
                    for g in range(self.G):
                        plans.append(TrialPlan(f"{tag}/s{s}/t{j}/g{g}", f"{tag}/s{s}/t{j}", sequence, [task_id], j,
                                               sequence_index=s))
        return plans

    def mine(self, plans: Sequence[TrialPlan]) -> list[TrialPlan]:
        """The plans of the sequences this process plays (`distributed.shard`; all of them on one process)."""
        return [p for p in plans if p.sequence_index % self.world_size == self.rank]

    # ------------------------------------------------------------------ playing
    def play(self, plans: Sequence[TrialPlan], generate: GenerateFn, step: int = 0) -> RolloutResult:
        """Play every planned trial to its end on the pool's envs, a waiting trial starting on whichever env
        frees up: in rounds (every trial in play generated together, then every env stepped), or with
        `overlap` as the trials become ready (see "Overlap" in the module docstring)."""
        result = RolloutResult(samples=[], task_rewards={}, success={}, plans=list(plans))
        for plan in plans:
            result.task_rewards[plan.trial_id] = [0.0] * len(plan.task_ids)
        schedule = _Schedule(list(plans), deque(range(len(plans))), [0] * len(plans), step=step)
        progress = _Progress(self.progress, step, len(plans))
        if self.overlap:
            self._play_overlapped(schedule, generate, result, progress)
        else:
            self._play_lockstep(schedule, generate, result, progress)
        return _lockstep_order(result)

    def _play_lockstep(self, schedule: _Schedule, generate: GenerateFn, result: RolloutResult,
                       progress: "_Progress") -> None:
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
            for start in range(0, len(live), self.generation_batch):
                completions.extend(self._generate(generate, schedule, live[start:start + self.generation_batch]))
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
                         progress: "_Progress") -> None:
        """As the trials become ready: envs step (in their workers or actors) while the model generates for
        other trials. When trials wait for the model and envs are still busy, `_Pacer` decides between a
        call now and waiting for the busy ones to join it."""
        pool = self.pool
        if pool.workers == 0 and not self._warned_in_process:
            self._warned_in_process = True
            logger.warning("overlap without env workers or Ray: envs in this process step while nothing else "
                           "runs, so nothing overlaps (set env_workers or ray_address)")
        pacer = _Pacer(self.overlap_wait)
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
            for start in range(0, len(ready), self.generation_batch):
                chunk = ready[start:start + self.generation_batch]
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
        seeds = [stable_seed(self.seed, schedule.step, schedule.trial(i).trial_id, "turn",
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
            result.task_rewards[plan.trial_id][position] += float(reward) * self.success_reward
        turn = turn_from_step(
            prompt=prompt, response=completion.text, reward=reward, info=info,
            sequence_id=plan.sequence.id, trial_id=plan.trial_id, benchmark=plan.sequence.tasks[0].benchmark,
            prompt_tokens=len(completion.prompt_ids), completion_tokens=len(completion.completion_ids),
            position_offset=plan.position_offset,
            extra={"step": schedule.step, "group_id": plan.group_id, "prompt_truncated": completion.prompt_truncated},
        )
        # credit indexes the trial's own task list, so the tag keeps the episode-local position
        seen = schedule.observations[index]  # what the turn was asked from: GiGPO's anchor state
        tag = TurnTag(
            trial=plan.trial_id, group=plan.group_id, role=role, position=position,
            format_valid=turn.format_valid, step=turn.step_index,
            reward=float(reward) * self.success_reward if role == "solve" else 0.0,
            anchor=anchor_key(seen) if role == "solve" else None,
        )
        result.samples.append(TurnSample(turn, tag, completion.prompt_ids, completion.completion_ids,
                                         completion.sampler_logps))
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
            requests[index] = (_reset_seed(self.seed, schedule.step, plan.trial_id), {"task_ids": plan.task_ids})
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
            return EnvPool.unpack(exc.replies), set(exc.indices)

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
            result.samples = [s for s in result.samples if s.tag.trial != plan.trial_id]
            result.success.pop(plan.trial_id, None)
            if schedule.attempts[trial] >= self.max_attempts:
                result.task_rewards.pop(plan.trial_id, None)
                result.dropped[plan.trial_id] = f"its env worker died or hung {schedule.attempts[trial]} times"
                logger.warning("dropping trial %s from this rollout: %s", plan.trial_id, result.dropped[plan.trial_id])
                continue
            result.task_rewards[plan.trial_id] = [0.0] * len(plan.task_ids)
            result.replayed += 1
            again.append(trial)
        schedule.queue.extendleft(sorted(again, reverse=True))


def _lockstep_order(result: RolloutResult) -> RolloutResult:
    """The result with its samples in the order a lockstep rollout (one env per trial) records them: every
    trial's first turn in plan order, then every trial's second...; and its per-trial dicts in plan order.
    So the rows TRL gets (its mini-batch split, the packing's ties) do not depend on the pool's size."""
    order = {plan.trial_id: n for n, plan in enumerate(result.plans)}
    turns_so_far: dict[str, int] = defaultdict(int)
    keys = []
    for sample in result.samples:  # a trial's samples are appended in the order it played them
        keys.append((turns_so_far[sample.tag.trial], order[sample.tag.trial]))
        turns_so_far[sample.tag.trial] += 1
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
    return _lockstep_order(merged)


def anchor_key(observation: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """The state a solve turn acted in, as GiGPO groups it: the engine's observation text and the admissible
    actions shown (empty where the env lists none). Never the prompt: it holds the trial's own history, the
    skill document and the step count, which differ between trials in the same state."""
    return str(observation.get("observation", "")), tuple(observation.get("admissible_actions") or ())


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
    stats["tokens/completion"] = float(result.completion_tokens)
    stats["tokens/prompt"] = float(result.prompt_tokens)
    stats["prompts_truncated"] = float(result.truncated_prompts)
    stats["time/generation_s"] = result.generation_seconds
    stats["time/env_s"] = result.env_seconds
    groups = [len(g) for g in anchor_groups([sample.tag for sample in result.samples]).values()]
    solve = sum(groups)
    # how often states repeat across trials of a task (what GiGPO's step-level groups can use)
    stats["anchor/mean_group_size"] = solve / len(groups) if groups else 0.0
    stats["anchor/repeated_share"] = sum(g for g in groups if g > 1) / solve if solve else 0.0
    stats["trials/replayed"] = float(result.replayed)
    stats["trials/dropped"] = float(len(result.dropped))
    # what the curated documents hold (benchmarks whose tasks say what they reveal: the transfer probe)
    tasks = {task.id: task for plan in result.plans for task in plan.sequence.tasks}
    held = document_stats([sample.turn for sample in result.samples], tasks.get, backend_class)
    for name in ("states_all", "states_latest", "instance_words", "reads_own_rule"):
        if name in held:
            stats[f"documents/{name}"] = held[name]
    return stats
