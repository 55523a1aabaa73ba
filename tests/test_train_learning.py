"""Learning check: on a task with a learnable signal, a tiny offline model's mean reward rises under
SkillRise training with TRL's loss and optimiser (the whole loop: rollout, credit, advantages, update).

The signal backend is deterministic and defined here: a task is solved when the command starts with a
letter from a to m. A freshly initialised tiny model does that about a third of the time, so the
group-relative advantages carry signal from the first step.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest

from skillrise_gym.backends import BACKENDS
from skillrise_gym.backends.base import ActionGrammar, Backend, StepResult
from skillrise_gym.tasks import Task
from skillrise_train.config import TrainConfig

pytest.importorskip("trl")

FIRST_LETTERS = set("abcdefghijklm")


class SignalBackend(Backend):
    """Solved when the command's first character is one of a..m; one family, three difficulties."""

    benchmark: ClassVar[str] = "toy"  # reuse the toy prompt profile
    splits: ClassVar[tuple[str, ...]] = ("train", "test")
    default_max_task_steps: ClassVar[int] = 1

    def __init__(self) -> None:
        self._task: Task | None = None

    def list_tasks(self, split: str) -> list[Task]:
        self.check_split(split)
        return [
            Task(benchmark="toy", id=f"signal-{split}-{n}", family="signal", difficulty=float(n % 3), split=split,
                 payload={})
            for n in range(6)
        ]

    def reset(self, task: Task) -> StepResult:
        self._task = task
        return StepResult(observation="Say one word.")

    def task_description(self) -> str:
        return "say one word."

    def step(self, action: str) -> StepResult:
        won = action.strip()[:1].lower() in FIRST_LETTERS
        return StepResult(observation="Right." if won else "Wrong.", score=float(won), done=True, success=won)

    def admissible_actions(self) -> list[str]:
        return []

    def action_grammar(self) -> ActionGrammar:
        return ActionGrammar(templates=("any word",))

    def expert_action(self) -> str | None:
        return "apple"

    def close(self) -> None:
        pass


@pytest.fixture
def signal_backend(monkeypatch):
    monkeypatch.setitem(BACKENDS, "signal", (f"{__name__}:SignalBackend", None))
    return "signal"


def test_mean_reward_rises_on_a_learnable_signal(signal_backend, tmp_path):
    import torch

    from skillrise_train.trainer import SkillRiseTrainer

    torch.manual_seed(0)
    steps = 40
    config = TrainConfig(
        env=signal_backend, model="tiny", lora=False, K=2, G=4, S=2, max_task_steps=1, max_new_tokens=3,
        steps=steps, lr=1e-2, invalid_penalty=0.0, entropy_coef=0.0, output_dir=str(tmp_path), save_interval=1000,
        record_turns=False, seed=0, threads=1,
        max_prompt_tokens=64,  # the documented middle truncation keeps the update cheap; the signal needs no prompt
    )
    trainer = SkillRiseTrainer.from_config(config)
    success: list[float] = []

    from transformers import TrainerCallback

    class Track(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            success.append(trainer.last_stats["success/mean"])

    trainer.add_callback(Track())
    try:
        trainer.train()
    finally:
        trainer.rollout.close()
    assert len(success) == steps
    first, last = float(np.mean(success[:8])), float(np.mean(success[-8:]))
    assert last > first + 0.25, f"mean success did not rise: first 8 steps {first:.2f}, last 8 steps {last:.2f}"
    assert last > 0.7
