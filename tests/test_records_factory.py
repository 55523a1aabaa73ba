"""One `Turn` factory: a bench turn and a trainer turn for the same step of the same sequence are equal, field
for field (only the ids the two tools name differently, and each tool's own `extra`, may differ)."""

from __future__ import annotations

import dataclasses
import zlib
from pathlib import Path

from skillrise_gym.agents.base import Agent, AgentOutput
from skillrise_gym.bench.runner import BenchConfig, run_bench
from skillrise_gym.records import Turn, read_turns, turn_from_step
from skillrise_train.rollout import RolloutEngine
from skillrise_train.samples import Completion
from skillrise_train.rollout_setup import RolloutConfig

#: answers that serve both roles: the first <action> pair is the command, the last <skill> pair the document
ANSWERS = (
    "<action>put it in the red bin</action> <skill>glass goes in the red bin</skill>",
    "<action>put it in the blue bin</action> <skill>metal goes in the blue bin</skill>",
    "put it in the green bin",  # untagged: the whole text is the command, flagged invalid
)


def answer(prompt: str) -> str:
    """A deterministic policy of the prompt alone (the same answer from the bench and the trainer)."""
    return ANSWERS[zlib.crc32(prompt.encode()) % len(ANSWERS)]


def generate(prompts: list[str], prefixes: list[str], seeds: list[int] | None = None) -> list[Completion]:
    return [Completion([1] * len(p.split()), [2] * len(answer(p).split()), answer(p)) for p in prompts]


class PromptAgent(Agent):
    name = "prompt-hash"

    def act(self, observations, infos=None):
        return [AgentOutput(answer(str(o["prompt"])), prompt_tokens=len(str(o["prompt"]).split()),
                            completion_tokens=len(answer(str(o["prompt"])).split())) for o in observations]


SHARED = [f.name for f in dataclasses.fields(Turn) if f.name not in ("trial_id", "sequence_id", "extra")]


def key(turn: Turn) -> tuple:
    return turn.position, turn.role, turn.step_index


def test_a_bench_turn_and_a_trainer_turn_for_the_same_step_are_equal(tmp_path: Path):
    out = tmp_path / "bench"
    run_bench(BenchConfig(env="rulebook", out=str(out), K=[3], num_sequences=1, split="train", seed=5, workers=0,
                          progress=False, plots=False), PromptAgent())
    bench = read_turns(out / "turns.jsonl")

    engine = RolloutEngine(RolloutConfig("rulebook", "skillrise", K=3, G=1, S=1, seed=5))
    try:
        result = engine.play(engine.plan(engine.sequences(0, 1), tag="step0"), generate)
    finally:
        engine.close()
    trainer = [s.turn for s in result.samples]

    assert len(bench) == len(trainer) > 3
    assert {t.role for t in bench} == {"solve", "curate"} and not all(t.format_valid for t in bench)
    assert [key(t) for t in bench] == [key(t) for t in trainer]
    for mine, theirs in zip(bench, trainer):
        assert {n: getattr(mine, n) for n in SHARED} == {n: getattr(theirs, n) for n in SHARED}
    # the schema's own conventions, as records.py documents them
    solve = [t for t in bench if t.role == "solve"]
    assert solve[0].step_index == 0 and all(t.step_index == 0 for t in bench if t.role == "curate")


def test_the_factory_offsets_single_task_episodes_and_keeps_the_invalid_reason():
    info = {"role": "solve", "position": 0, "task_id": "t", "family": "f", "action": "", "format_valid": False,
            "success": False, "score": 0.0, "step_index": 2, "invalid_action": "empty"}
    turn = turn_from_step(prompt="p", response="", reward=0.0, info=info, sequence_id="s", trial_id="s/g0",
                          benchmark="toy", position_offset=3, extra={"step": 1})
    assert (turn.position, turn.step_index, turn.extra) == (3, 1, {"step": 1, "invalid_action": "empty"})
