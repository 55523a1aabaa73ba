"""The player: the one loop that plays trials on an env pool, for the bench (`bench/runner.py`), the trainer's
rollouts (`skillrise_train/rollout.py`) and its evaluation (a bench run).

A *trial* is one play of an episode: a reset to its task ids (with its own reset seed), then turns until the
env says it ended. The player keeps the trials waiting in a queue and the pool's envs busy:

- a free env takes the next waiting trial (in the order given) and is reset to it; a trial whose tasks all
  failed to load ends at its reset;
- the trials in play are asked for their answers (`act`, in chunks of at most `batch` trials) and the answers
  are stepped in their envs; a trial whose episode ended frees its env for the next one;
- a worker process (or Ray actor) that dies or hangs loses the trials it held: each is played again from its
  start on the next free env, up to `max_attempts` plays, after which the consumer decides (the bench stops,
  the trainer drops the trial from its step). The other envs' replies of that call are kept.

Two ways to play, the same turns: in rounds (`overlap` off: every trial in play answers, then every env
steps, waiting for the slowest), or overlapped (each trial goes on as soon as its env answers: answers are
sent to the envs without waiting, and envs step in their workers while the agent answers for other trials;
`Pacer` decides when to call the agent while some envs are still busy). Envs in this process (no workers, no
Ray) cannot step during a call, so overlapped play there goes in rounds.

What the player does not do is the consumers' own: what a turn's answer is (the bench asks its agent, the
trainer samples its policy with a seed per turn), what a turn becomes (a bench record, a training sample
with its credit tag), what an ended trial means (a committed sequence, a trial's rewards), and what is done
with a trial lost too often. They give these as callbacks to `play`.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from skillrise_gym.pools import BaseEnvPool, WorkerError, unpack

#: overlapped play: the longest a trial waits for others to join its agent call (seconds)
OVERLAP_WAIT = 1.0


class Answer(Protocol):
    """What `act` returns per trial: at least the text the env steps (a bench `AgentOutput`, a trainer
    `Completion`)."""

    text: str


@dataclass
class Trial:
    """One play of an episode. `index`: its place in the order trials start and are asked (plan order);
    `task_ids` and `reset_seed`: its reset; `name`: what messages call it; `key`: the consumer's own handle."""

    index: int
    task_ids: list[str]
    reset_seed: int | None = None
    name: str = ""
    key: Any = None
    attempts: int = 0  # plays started
    turns: int = 0  # turns of the current play (a replay counts from 0 again)
    started: float = 0.0  # time.monotonic() at the current play's reset
    observation: dict[str, Any] | None = None  # the latest observation of the current play
    info: dict[str, Any] | None = None


@dataclass
class PlayStats:
    """What a `play` took: seconds in `act` calls, seconds on the envs (the rest), rounds of agent calls,
    trials played again after a lost worker."""

    act_seconds: float = 0.0
    env_seconds: float = 0.0
    rounds: int = 0
    replayed: int = 0


Act = Callable[[list[Trial]], Sequence[Answer]]
OnTurn = Callable[[Trial, dict[str, Any], Answer, tuple[Any, ...]], None]
OnEnd = Callable[[Trial, dict[str, Any]], None]
OnLost = Callable[[Trial, bool, str], None]


class Player:
    """Plays trials on `pool` (see the module docstring). `batch`: most trials per `act` call (None: all in
    play at once); `log`: where warnings go (a lost worker)."""

    def __init__(self, pool: BaseEnvPool, *, max_attempts: int = 2, batch: int | None = None,
                 overlap: bool = False, overlap_wait: float = OVERLAP_WAIT,
                 log: Callable[[str], None] | None = None) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if batch is not None and batch < 1:
            raise ValueError(f"batch must be >= 1 or None, got {batch}")
        if not (math.isfinite(overlap_wait) and overlap_wait >= 0):
            raise ValueError(f"overlap_wait must be a number of seconds >= 0, got {overlap_wait!r}")
        self.pool = pool
        self.max_attempts = max_attempts
        self.batch = batch
        self.overlap = overlap
        self.overlap_wait = overlap_wait
        self.log = log or (lambda message: None)
        self.queue: deque[Trial] = deque()
        self.slots: dict[int, Trial] = {}  # env index -> the trial it plays
        self.stats = PlayStats()

    # ----------------------------------------------------------------- top level
    def play(self, trials: Sequence[Trial], act: Act, on_turn: OnTurn, on_end: OnEnd, *,
             on_lost: OnLost | None = None, on_round: Callable[[], None] | None = None) -> PlayStats:
        """Play every trial to its end. `act(trials)`: one answer per trial in play (its `observation`); `on_turn
        (trial, observation asked, answer, step reply)`: after each step; `on_end(trial, info)`: the trial's
        episode ended (`info["summary"]`); `on_lost(trial, replay, reason)`: its worker was lost, and it is
        played again (`replay`) or not (attempts spent; the consumer may raise); `on_round()`: after each
        round of agent calls. Exceptions of the callbacks and the agent propagate (the caller closes the pool)."""
        self.queue = deque(sorted(trials, key=lambda t: t.index))
        self.slots = {}
        self.stats = PlayStats()
        self._act, self._on_turn, self._on_end = act, on_turn, on_end
        self._on_lost = on_lost or (lambda trial, replay, reason: None)
        self._on_round = on_round or (lambda: None)
        began = time.perf_counter()
        try:
            if self.overlap:
                self._play_overlapped()
            else:
                self._play_rounds()
        finally:
            self.stats.env_seconds = max(0.0, time.perf_counter() - began - self.stats.act_seconds)
        return self.stats

    def unfinished(self) -> int:
        """Trials in play or waiting."""
        return len(self.slots) + len(self.queue)

    # ----------------------------------------------------------------- the two loops
    def _play_rounds(self) -> None:
        """Every trial in play answers (in chunks of `batch`), then every env steps, waiting for the slowest."""
        self._start()
        while self.slots:
            live = self._in_order(self.slots)
            asked = {i: self.slots[i].observation or {} for i in live}
            answers: list[Answer] = []
            for chunk in self._chunks(live):
                answers.extend(self._answers(chunk))
            replies, lost = self._call(self.pool.step_many, {i: a.text for i, a in zip(live, answers)})
            for index, answer in zip(live, answers):
                if index not in lost:
                    self._stepped(index, asked[index], answer, replies[index])
            self._lost(lost)
            self._start()
            self.stats.rounds += 1
            self._on_round()

    def _play_overlapped(self) -> None:
        """As the trials become ready: envs step (in their workers or actors) while the agent answers for
        other trials; while some envs are busy, `Pacer` decides between calling now and waiting for them."""
        pool = self.pool
        pacer = Pacer(self.overlap_wait)
        waiting: dict[int, float] = {}  # env -> since when its trial waits for the agent
        sent: dict[int, float] = {}  # env -> when its pending command was sent
        asked: dict[int, tuple[dict[str, Any], Answer]] = {}  # env -> the observation asked and its answer
        sent.update(dict.fromkeys(self._submit_starts(), time.perf_counter()))
        while self.slots or self.queue:
            # how long to wait for replies: the pacer's (None: nothing waits for the agent, so block for an env)
            replies, lost = self._call(pool.receive, pacer.wait(waiting, sent)) if sent else ({}, set())
            now = time.perf_counter()
            for index, reply in sorted(replies.items()):
                pacer.answered(now - sent.pop(index))
                if index in asked:  # a step
                    observation, answer = asked.pop(index)
                    if self._stepped(index, observation, answer, reply):
                        waiting[index] = now
                else:  # a reset
                    self._started(index, reply)
                    if index in self.slots:
                        waiting[index] = now
            for index in lost:
                waiting.pop(index, None)
                asked.pop(index, None)
                sent.pop(index, None)
            self._lost(lost)
            sent.update(dict.fromkeys(self._submit_starts(), time.perf_counter()))
            if not waiting or (sent and pacer.wait(waiting, sent) != 0.0):
                continue
            for chunk in self._chunks(self._in_order(waiting)):
                began = time.perf_counter()
                answers = self._answers(chunk)
                pacer.generated(len(chunk), time.perf_counter() - began)
                began = time.perf_counter()
                for index, answer in zip(chunk, answers):
                    waiting.pop(index)
                    asked[index] = (self.slots[index].observation or {}, answer)
                    sent[index] = began
                pool.submit_steps({i: a.text for i, a in zip(chunk, answers)})  # they step while the next chunk is answered
            self.stats.rounds += 1
            self._on_round()

    # ----------------------------------------------------------------- pieces
    def _in_order(self, envs: Any) -> list[int]:
        """Env indices in their trials' order (plan order)."""
        return sorted(envs, key=lambda i: self.slots[i].index)

    def _chunks(self, envs: list[int]) -> list[list[int]]:
        size = self.batch or max(1, len(envs))
        return [envs[start:start + size] for start in range(0, len(envs), size)]

    def _answers(self, envs: list[int]) -> list[Answer]:
        """One `act` call for the trials on these envs."""
        trials = [self.slots[i] for i in envs]
        began = time.perf_counter()
        answers = list(self._act(trials))
        self.stats.act_seconds += time.perf_counter() - began
        if len(answers) != len(trials):
            raise ValueError(f"act returned {len(answers)} answers for {len(trials)} trials")
        return answers

    def _stepped(self, index: int, observation: dict[str, Any], answer: Answer, reply: tuple[Any, ...]) -> bool:
        """Env `index` stepped its trial's answer: the turn goes to the consumer; True while the trial goes
        on, False when it ended (its env is free for the next one)."""
        trial = self.slots[index]
        trial.turns += 1
        self._on_turn(trial, observation, answer, reply)
        next_observation, _reward, terminated, truncated, info = reply
        if terminated or truncated:
            del self.slots[index]
            self._on_end(trial, info)
            return False
        trial.observation, trial.info = next_observation, info
        return True

    def _start(self) -> None:
        """Start waiting trials on every free env and wait for their resets. An env whose trial has nothing to
        play (its tasks failed to load) takes the next one; the trials of a worker lost meanwhile wait again."""
        while True:
            requests = self._assign()
            if not requests:
                return
            replies, lost = self._call(self.pool.reset_many, requests)
            for index, reply in sorted(replies.items()):
                self._started(index, reply)
            self._lost(lost)

    def _submit_starts(self) -> list[int]:
        """`_start` without waiting: the resets of the trials that can start now are sent; their replies come
        with the steps'."""
        requests = self._assign()
        if requests:
            self.pool.submit_resets(requests)
        return list(requests)

    def _assign(self) -> dict[int, tuple[int | None, dict[str, Any]]]:
        """The next waiting trials on the free envs (in env order): their reset requests."""
        free = [i for i in range(self.pool.num_envs) if i not in self.slots]
        requests = {}
        for index in free[: len(self.queue)]:
            trial = self.queue.popleft()
            trial.attempts += 1
            trial.turns = 0
            trial.started = time.monotonic()
            trial.observation = trial.info = None
            self.slots[index] = trial
            requests[index] = (trial.reset_seed, {"task_ids": list(trial.task_ids)})
        return requests

    def _started(self, index: int, reply: tuple[Any, Any]) -> None:
        """A trial's reset came back: its first observation, or (its tasks failed to load: nothing to play)
        its end, and the env is free again."""
        observation, info = reply
        trial = self.slots[index]
        trial.observation, trial.info = observation, info
        if info.get("sequence_done"):
            del self.slots[index]
            self._on_end(trial, info)

    def _call(self, call: Callable[..., dict[int, Any]], *args: Any) -> tuple[dict[int, Any], set[int]]:
        """`call(*args)` on the pool: (the replies that came, the envs whose worker was lost). A lost worker
        loses every env it holds, also those this call asked nothing of (a trial mid-episode, while another
        env of that worker was being reset)."""
        try:
            return call(*args), set()
        except WorkerError as exc:
            names = [self.slots[i].name or str(self.slots[i].index) for i in exc.indices if i in self.slots]
            self.log(f"{exc}; restarting trial(s) {names}")
            return unpack(exc.replies), set(exc.indices)

    def _lost(self, lost: set[int]) -> None:
        """Trials whose worker died or hung wait again, first in line, to play from the start on the next free
        env, up to `max_attempts` plays; after that the consumer is told (`on_lost` with replay False)."""
        again = []
        for index in sorted(lost):
            trial = self.slots.pop(index, None)
            if trial is None:  # an env without a trial (it ended, or none was waiting)
                continue
            if trial.attempts >= self.max_attempts:
                self._on_lost(trial, False, f"its env worker died or hung {trial.attempts} times")
                continue
            self._on_lost(trial, True, "its env worker died or hung")
            self.stats.replayed += 1
            again.append(trial)
        self.queue.extendleft(sorted(again, key=lambda t: t.index, reverse=True))


class Pacer:
    """When overlapped play calls the agent, while some trials wait for it and some envs are busy.

    Waiting for the busy envs merges two calls into one, saving one call's fixed overhead; calling now lets
    the busy envs step during the call (and the waiting trials' envs during the next one), hiding env time
    behind generation. So: call now once the busy envs are expected to take longer than that overhead and
    at least half the trials in play wait (two groups that alternate, rather than many small calls);
    otherwise wait for the busy ones, never longer than `cap` seconds after the first trial began to wait (a
    slow env does not hold back the others). A GPU server's calls cost little beyond their prompts, so
    trials there go in two alternating groups when env steps are slow enough to hide (ALFWorld) and in
    whole rounds when they are not (WebShop); HF generate on a CPU costs seconds a call: whole rounds.

    Estimates, from this play: an env's answer time (from sending a command to its reply: the mean of the
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
        """Seconds to wait for env replies before calling the agent for the `waiting` trials (env -> since
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


__all__ = ["OVERLAP_WAIT", "Pacer", "PlayStats", "Player", "Trial"]
