"""`Progress` reports a long rollout's state. Used by `rollout.RolloutEngine`. (When an overlapped rollout
calls the model is `skillrise_gym.player.Pacer`'s: the player serves the bench too.)"""

from __future__ import annotations

import time
from typing import Any, Callable

#: a rollout longer than this reports its progress every this many seconds (`RolloutEngine.progress`)
PROGRESS_SECONDS = 30.0


class Progress:
    """Reports a long rollout's state to `report` (the CLI prints it): on a terminal (`live`), one line
    rewritten after every round; in a log, a line every `PROGRESS_SECONDS`. Each says the rounds, turns and
    trials done, the generation's tokens/s, and an ETA from the previous rollout's duration (`expected_s`)."""

    def __init__(self, report: Callable[[str], None] | None, step: int, trials: int, live: bool = False,
                 expected_s: float | None = None) -> None:
        self.report, self.step, self.trials, self.live, self.expected_s = report, step, trials, live, expected_s
        self.began = self.last = time.perf_counter()
        self.rounds = 0

    def tick(self, player: Any, result: Any) -> None:
        """One round (one generation pass) of `player` (a `skillrise_gym.player.Player`) done."""
        self.rounds += 1
        now = time.perf_counter()
        if self.report is None or not player.slots or (not self.live and now - self.last < PROGRESS_SECONDS):
            return
        self.last = now
        elapsed = now - self.began
        generation = player.stats.act_seconds
        tokens = sum(len(s.completion_ids) for s in result.samples)
        eta = f", about {max(0.0, self.expected_s - elapsed):.0f} s left" if self.expected_s else ""
        self.report(
            f"  rollout of step {self.step + 1}: {self.rounds} rounds, {len(result.samples)} turns, "
            f"{self.trials - player.unfinished()}/{self.trials} trials done, {elapsed:.0f} s (generation "
            f"{generation:.0f} s at {tokens / generation if generation else 0.0:.1f} tok/s, envs "
            f"{max(0.0, elapsed - generation):.0f} s){eta}")
