"""How a rollout paces itself: `Pacer` decides when an overlapped rollout calls the model (now, or after the
busy envs answer), `Progress` reports a long rollout's state. Used by `rollout.RolloutEngine`."""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any, Callable

#: a rollout longer than this reports its progress every this many seconds (`RolloutEngine.progress`)
PROGRESS_SECONDS = 30.0


class Progress:
    """Reports a long rollout's state every `PROGRESS_SECONDS` to `report` (the CLI prints it)."""

    def __init__(self, report: Callable[[str], None] | None, step: int, trials: int) -> None:
        self.report, self.step, self.trials = report, step, trials
        self.began = self.last = time.perf_counter()
        self.rounds = 0

    def tick(self, schedule: Any, result: RolloutResult) -> None:
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


class Pacer:
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
