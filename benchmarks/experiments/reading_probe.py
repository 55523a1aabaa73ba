"""Can a small model learn to read a document of several rules by the item's kind at all?

The R=2 transfer result is capped by the solver (docs/results/transfer-r2.md): given the perfect curator's
documents the warm-started tiny model follows one clause whatever the item. This probe removes everything else:
a supervised warm start on *only* the warm start's reading notes of several rules (`reading_examples`, the ones
with `several=True`: two or three clauses naming different bins, one about the item, target the bin of the one
about the item), then the format check's `follow_several` on notes from sequences it did not train on.

    python benchmarks/experiments/reading_probe.py --steps 1200                       # the tiny model
    python benchmarks/experiments/reading_probe.py --steps 1200 --width 128 --layers 2
    python benchmarks/experiments/reading_probe.py --model smollm2-135m-instruct --lora 16 --steps 100 --batch-size 8 --lr 1e-3
    python benchmarks/experiments/reading_probe.py --model smollm2-135m-instruct --steps 0          # the pretrained model as is

Prints and appends one row to benchmarks/results/r2_reading/reading_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repo root (benchmarks/<kind>/<name>.py)
if str(ROOT) not in sys.path:  # run as a file
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results" / "r2_reading" / "reading_probe.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Prints the row and appends it to the JSON list in "
                                            "benchmarks/results/r2_reading/reading_probe.json.")
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--sequences", type=int, default=600, help="sequences whose first task gets reading notes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=None,
                        help="a model name or folder (as --model of skillrise-train); default: a fresh tiny model of "
                             "--width x --layers")
    parser.add_argument("--lora", type=int, default=0, help="train a LoRA adapter of this rank (all linear "
                                                           "layers, alpha 2 x rank) instead of every weight")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--check-sequences", type=int, default=80, help="held-out sequences of the format check")
    args = parser.parse_args(argv)
    if args.steps < 0 or args.lora < 0 or args.batch_size < 1 or args.check_sequences < 1:
        parser.error("--steps and --lora must be >= 0, --batch-size and --check-sequences >= 1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import numpy as np
    import torch

    from skillrise_gym.env import SequenceEnv
    from skillrise_gym.models import build_tiny_model, encode_chat, load_model_and_tokenizer
    from skillrise_train.warmstart import check_format, greedy_answerer, several_reading_examples, warm_start

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    env = SequenceEnv(backend="rulebook", K=4, split="train", max_task_steps=1, prompt_style="compact",
                      backend_options={"rules": 2, "bins": 4})
    examples = several_reading_examples(env, args.sequences, 6, np.random.default_rng(args.seed))
    if args.model is None:
        with tempfile.TemporaryDirectory() as scratch:
            path = build_tiny_model(Path(scratch) / "model", hidden_size=args.width, num_layers=args.layers)
            model, tokenizer = load_model_and_tokenizer(path)
    else:
        model, tokenizer = load_model_and_tokenizer(args.model)
    if args.lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=args.lora, lora_alpha=2 * args.lora, lora_dropout=0.0,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))

    def encode(prompt: str, prefix: str) -> tuple[list[int], bool]:
        return encode_chat(tokenizer, prompt, prefix, max_tokens=4096)

    started = time.perf_counter()
    losses = warm_start(model, tokenizer, encode, examples, args.steps, batch_size=args.batch_size, lr=args.lr,
                        seed=args.seed, progress=lambda line: print(line, flush=True))
    wall = time.perf_counter() - started
    model.eval()
    with torch.no_grad():
        check = check_format(env, greedy_answerer(model, tokenizer, encode, 16), sequences=args.check_sequences,
                             seed=args.seed + 1,
                             documents="several")
    env.close()
    row = {"model": args.model or "tiny", "lora": args.lora, "batch_size": args.batch_size,
           "width": args.width if args.model is None else None,
           "layers": args.layers if args.model is None else None, "steps": args.steps, "lr": args.lr, "seed": args.seed,
           "examples": len(examples), "final_loss": round(sum(losses[-50:]) / max(1, len(losses[-50:])), 3),
           "follow_several": check.follow_several, "follow": check.follow, "valid": check.valid,
           "wall_seconds": round(wall, 1), "check_seconds": round(time.perf_counter() - started - wall, 1),
           "command": "python benchmarks/experiments/reading_probe.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    print(json.dumps(row))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    rows = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    RESULTS.write_text(json.dumps(rows + [row], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
