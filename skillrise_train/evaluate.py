"""Held-out evaluation during training, through the bench runner (`skillrise_gym.bench`).

The policy being trained is wrapped as a bench `Agent` whose `act` is the trainer's own batched generation
(TRL's path: HF generate, or vLLM on GPUs), so an evaluation is an ordinary bench run: the same pinned
sequences every time (the bench draws them from its seed), turns and a summary with CIs in
``<output_dir>/eval/step-N/``. It plays the training's own episode (`SkillRiseTrainer.episode`: carry mode,
prompt style, step limit, engine options, call framing) on the held-out split, at the run's K (an algorithm
whose trials are single tasks, GRPO's, is measured on the K-task sequences those tasks come from), so it
sees the prompts training saw, and ``skillrise-bench --model RUN/final`` (which reads the saved episode)
plays the same.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from skillrise_gym.agents.base import Agent, AgentOutput, stable_seed
from skillrise_gym.episode import EpisodeSpec
from skillrise_train.config import TrainConfig
from skillrise_train.rollout import EVAL_SEED_OFFSET
from skillrise_train.samples import GenerateFn


class PolicyAgent(Agent):
    """The policy under training as a bench agent."""

    name = "skillrise-train"
    can_prefill = True  # the trainer's generation continues each observation's answer_prefix

    def __init__(self, generate: GenerateFn, batch_size: int, identity: dict[str, Any], seed: int = 0):
        self.generate = generate
        self.batch_size = batch_size
        self.identity = identity
        self.seed = seed

    def act(self, observations: Sequence[dict[str, Any]], infos: Sequence[dict[str, Any]] | None = None) -> list[AgentOutput]:
        """One generation call; each prompt samples from an RNG seeded by its trial and turn (the bench gives
        both in `infos`), as in training rollouts, so an evaluation does not depend on its batches."""
        started = time.perf_counter()
        seeds = None
        if infos is not None and all("trial_id" in i and "turn" in i for i in infos):
            seeds = [stable_seed(self.seed, "eval", i["trial_id"], "turn", i["turn"]) for i in infos]
        completions = self.generate([str(o["prompt"]) for o in observations],
                                    [str(o.get("answer_prefix") or "") for o in observations], seeds)
        share = (time.perf_counter() - started) / max(1, len(completions))
        return [
            AgentOutput(c.text, prompt_tokens=len(c.prompt_ids), completion_tokens=len(c.completion_ids),
                        latency_s=share, extra={"prompt_truncated": c.prompt_truncated})
            for c in completions
        ]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **self.identity}

    def framing(self) -> dict[str, Any]:
        return dict(self.identity.get("framing") or {})


def evaluate(config: TrainConfig, episode: EpisodeSpec, generate: GenerateFn, step: int, split: str,
             out: Path) -> dict[str, Any]:
    """Play `config.eval_sequences` held-out sequences of `episode` (the training's) on `split`, one trial
    each; returns success by position."""
    from skillrise_gym.bench.runner import BenchConfig, run_bench

    spec = evaluation_episode(episode, split, config.K)
    framing = spec.framing()
    agent = PolicyAgent(generate, config.generation_batch,
                        {"model": config.model, "algo": config.algo, "output_dir": str(out), "step": step,
                         "framing": framing}, seed=config.seed + EVAL_SEED_OFFSET)
    bench = BenchConfig.from_episode(
        spec, out=str(out / "eval" / f"step-{step}"), num_sequences=config.eval_sequences,
        seed=config.seed + EVAL_SEED_OFFSET, workers=config.env_workers,
        parallel=max(1, min(config.eval_sequences, config.generation_batch)), progress=False, plots=False,
        worker_timeout=config.env_timeout, ray_address=config.ray_address, ray_num_cpus=config.ray_num_cpus,
        ray_memory=config.ray_memory,
    )
    outcome = run_bench(bench, agent)
    block = outcome.summary["by_carry"][bench.carry[0]]["blocks"][0]  # every layout has by_carry
    success = [float(p["mean"]) for p in block.get("success_by_position", [])]
    record = {
        "step": step, "split": split, "sequences": config.eval_sequences,
        "success_by_position": success, "success": sum(success) / len(success) if success else 0.0,
    }
    if "pass_at_k" in block:  # repeat mode (lamer): solved in at least one of the first k attempts
        record["pass_at_k"] = [float(p["mean"]) for p in block["pass_at_k"].values()]
    with open(out / "eval.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    return record


def evaluation_episode(episode: EpisodeSpec, split: str, K: int) -> EpisodeSpec:
    """The training `episode` as evaluation plays it: on the held-out `split`, at the run's sequence length
    `K` (the panel); every other field is the training's."""
    return episode.replace(split=split, K=K)
