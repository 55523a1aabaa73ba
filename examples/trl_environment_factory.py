"""One step of stock TRL GRPO on a SkillRise env, through TRL's own environment API (offline, CPU, a tiny
model): `GRPOTrainer(environment_factory=skillrise_gym.tool_env.environment_factory(ENV_ID))`.

    python examples/trl_environment_factory.py                       # the rulebook probe, K=2, one step
    python examples/trl_environment_factory.py --env-id SkillRise-WebShop-v0 --K 1 --out runs/trl-ws

The model plays each sequence through tool calls (`act`, `write_skills`) and the rollout is scored by the
env's `get_reward` (tasks solved). The tiny offline model is given TRL's own Qwen3 chat template (its own
cannot render tool calls, and TRL refuses such a template): its weights are random, so it calls no tool and
every reward is 0; the step shows the plumbing, not learning. What stock GRPO cannot express and
skillrise-train does (per-turn credit by task position and role): skillrise_gym/tool_env.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", default="SkillRise-Rulebook-v0")
    parser.add_argument("--K", type=int, default=2, help="tasks per sequence")
    parser.add_argument("--out", default=None, help="TRL's output_dir (default: a temporary folder)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from skillrise_gym.models import resolve_model_path
    from skillrise_gym.tool_env import environment_factory

    factory = environment_factory(args.env_id, K=args.K, prompt_style="compact")  # refused here if its extra is missing
    path = resolve_model_path("tiny")
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path)
    out = args.out or tempfile.mkdtemp(prefix="trl-env-")
    config = GRPOConfig(output_dir=out, max_steps=1, per_device_train_batch_size=2, num_generations=2,
                        max_completion_length=32, max_tool_calling_iterations=4, learning_rate=1e-5, use_cpu=True,
                        report_to="none", save_strategy="no", logging_steps=1, bf16=False, seed=0)
    from datasets import Dataset

    # one row per sequence: its seed column goes to reset(), so the G generations of a prompt play one sequence
    rows = 4
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": ""}]] * rows, "seed": list(range(rows))})
    trainer = GRPOTrainer(model=model, args=config, processing_class=tokenizer, train_dataset=dataset,
                          environment_factory=factory)
    trainer.train()
    logged = [row for row in trainer.state.log_history if "loss" in row]
    print(f"one step of stock GRPO on {args.env_id}: loss {logged[-1]['loss']:.4f}, reward "
          f"{logged[-1].get('reward', 0.0):.2f} (tasks solved per rollout), in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
