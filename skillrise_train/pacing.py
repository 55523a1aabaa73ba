"""`Progress` reports a long rollout's state. Used by `rollout.RolloutEngine`. (When an overlapped rollout
calls the model is `skillrise_gym.player.Pacer`'s: the player serves the bench too.)"""

from __future__ import annotations

import time
from typing import Any, Callable

#: a rollout longer than this reports its progress every this many seconds (`RolloutEngine.progress`)
PROGRESS_SECONDS = 30.0


class Progress:
    """Reports a long rollout's state every `PROGRESS_SECONDS` to `report` (the CLI prints it)."""

    def __init__(self, report: Callable[[str], None] | None, step: int, trials: int) -> None:
        self.report, self.step, self.trials = report, step, trials
        self.began = self.last = time.perf_counter()
        self.rounds = 0

    def tick(self, player: Any, result: Any) -> None:
        """One round (one generation pass) of `player` (a `skillrise_gym.player.Player`) done."""
        self.rounds += 1
        if self.report is None or not player.slots or time.perf_counter() - self.last < PROGRESS_SECONDS:
            return
        self.last = time.perf_counter()
        unfinished = player.unfinished()
        self.report(
            f"  rollout of step {self.step + 1}: {self.rounds} rounds, {len(result.samples)} turns, "
            f"{self.trials - unfinished}/{self.trials} trials done, {self.last - self.began:.0f} s "
            f"(generation {player.stats.act_seconds:.0f} s, envs "
            f"{max(0.0, self.last - self.began - player.stats.act_seconds):.0f} s)")
