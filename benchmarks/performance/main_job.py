"""The main job's step (`bash scripts/quickstart.sh`: WebShop, SmolLM2-135M-Instruct + LoRA, K=2, G=2, S=1,
tasks capped at 5 steps), its generation and update timed apart, under CPU settings side by side in one
process: torch threads 1 (the trainer's old default) or 2; generation in float32 (the policy itself) or in
bfloat16 (`--generation-dtype bfloat16`); the update in float32 or autocast to bfloat16 (`--bf16`); the
prompt prefix cache off or on (`--prefix-cache-mb`, skillrise_gym/prefix_cache.py). One trainer plays the same step's rollout under every setting,
interleaved (each setting once per round, `--rounds` rounds; no optimizer step, so the weights never change):
float32 draws the same tokens every time, bfloat16 nearly the same, so the work is the same. Medians and
ratios to float32 / 1 thread; the update is the trainer's `compute_loss` and backward on the rollout's rows.
For bfloat16 also the tolerance that matters to training: |log-prob| gap between the sampler and the
policy on the sampled tokens (mean, max) and the share of tokens whose ratio is outside the clip (0.8-1.2).

    python benchmarks/performance/main_job.py                    # about 20 minutes on an idle 2-core machine
    python benchmarks/performance/main_job.py --model tiny --rounds 1       # a quick look
    python benchmarks/performance/main_job.py --settings bfloat16/bfloat16/1/off bfloat16/bfloat16/1/on   # the prefix cache

Prints a table; saves benchmarks/results/main_job.json. Thread counts above the free cores are slower, not
faster: run it on an idle machine (the load average is saved with the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repo root (benchmarks/<kind>/<name>.py)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-task-steps", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="+", default=None, help="thread counts (default: 1 and 2)")
    parser.add_argument("--settings", nargs="+", default=None, metavar="GEN/UPDATE/THREADS/CACHE",
                        help="settings to compare, e.g. bfloat16/bfloat16/1/on (generation dtype, update dtype, "
                             "threads, prefix cache); the first is the ratios' baseline (default: float32/float32, "
                             "bfloat16/float32, bfloat16/bfloat16 with the cache off, and bfloat16/bfloat16 with it "
                             "on, at each of --threads)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "main_job.json"),
                        help="where the JSON goes: medians, ratios, the load average (default: "
                             "benchmarks/results/main_job.json)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    for name, value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false")):
        os.environ.setdefault(name, value)

    import torch

    from skillrise_train.config import TrainConfig
    from skillrise_train.trainer import SkillRiseTrainer

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    thread_counts = args.threads or sorted({1, min(2, cores)})
    # (generation dtype, update dtype, threads, prefix cache): the old defaults first, the ratios' baseline
    if args.settings:
        settings = [_setting(text, parser) for text in args.settings]
    else:
        settings = [(gen, upd, threads, cache) for gen, upd, cache in (
            ("float32", "float32", "off"), ("bfloat16", "float32", "off"), ("bfloat16", "bfloat16", "off"),
            ("bfloat16", "bfloat16", "on")) for threads in thread_counts]
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        config = TrainConfig(env="webshop", model=args.model, max_task_steps=args.max_task_steps, steps=1,
                             output_dir=str(Path(scratch) / "run"), record_turns=False, threads=1)
        trainer = SkillRiseTrainer.from_config(config)
        trainer.current_gradient_accumulation_steps = 1  # Trainer.train's loop sets it; one micro-step here
        trainer.model.train()
        runs: dict[tuple[str, str, int, str], list[dict]] = {setting: [] for setting in settings}
        cache_bytes = trainer.prefix_cache_bytes
        try:
            for round_ in range(args.rounds):
                for dtype, update, threads, cache in settings:
                    torch.set_num_threads(threads)
                    trainer.prefix_cache_bytes = cache_bytes if cache == "on" else 0
                    trainer.last_prefill = None
                    trainer.generation_dtype = None if dtype == "float32" else getattr(torch, dtype)
                    # what --bf16 does on a CPU: accelerate's autocast is torch's CPU autocast to bfloat16
                    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=update == "bfloat16")
                    started = time.perf_counter()
                    batch = trainer.rollout_batch()
                    rolled = time.perf_counter()
                    trainer.model.zero_grad(set_to_none=True)
                    with autocast:
                        loss = trainer.compute_loss(trainer.model, batch)
                    loss.backward()
                    done = time.perf_counter()
                    result = trainer.last_rollout
                    row = {"generation_seconds": round(result.generation_seconds, 2),
                           "env_seconds": round(result.env_seconds, 2),
                           "rollout_seconds": round(rolled - started, 2), "update_seconds": round(done - rolled, 2),
                           "step_seconds": round(done - started, 2), "prompt_tokens": result.prompt_tokens,
                           "completion_tokens": result.completion_tokens,
                           "calls": int(trainer.last_stats.get("generation/calls_per_process_max", 0)),
                           "prompt_reused": round(trainer.last_prefill.reused_share, 3) if cache == "on" else 0.0}
                    if "old_per_token_logps" in batch:  # outside the timing: how far the sampler is from the policy
                        with torch.no_grad():
                            mask = batch["completion_mask"].bool()
                            gap = (trainer.old_log_probs(batch) - batch["old_per_token_logps"])[mask]
                        row.update(logp_gap_mean=round(float(gap.abs().mean()), 4),
                                   logp_gap_max=round(float(gap.abs().max()), 3),
                                   ratio_outside_clip=round(float(((gap.exp() - 1).abs() > 0.2).float().mean()), 4))
                    runs[dtype, update, threads, cache].append(row)
                    print(f"round {round_ + 1} generation {dtype} update {update} threads {threads} prefix cache {cache}: "
                          + json.dumps(row), flush=True)
        finally:
            trainer.rollout.close()
    base = None
    rows = []
    for dtype, update, threads, cache in settings:
        samples = runs[dtype, update, threads, cache]
        median = {k: statistics.median(s[k] for s in samples) for k in samples[0]}  # gaps: their median too
        base = base or median
        rows.append({"generation_dtype": dtype, "update_dtype": update, "threads": threads, "prefix_cache": cache, **median,
                     "generation_speedup": round(base["generation_seconds"] / median["generation_seconds"], 2),
                     "update_speedup": round(base["update_seconds"] / median["update_seconds"], 2),
                     "step_speedup": round(base["step_seconds"] / median["step_seconds"], 2),
                     "all": samples})
    print(f"\n{'generation':>10s} {'update':>8s} {'threads':>7s} {'cache':>5s} {'gen s':>7s} {'update s':>8s} {'step s':>7s} "
          f"{'gen x':>6s} {'update x':>8s} {'step x':>6s} {'tokens':>8s}")
    for r in rows:
        print(f"{r['generation_dtype']:>10s} {r['update_dtype']:>8s} {r['threads']:>7d} {r['prefix_cache']:>5s} "
              f"{r['generation_seconds']:7.1f} "
              f"{r['update_seconds']:8.1f} {r['step_seconds']:7.1f} {r['generation_speedup']:6.2f} "
              f"{r['update_speedup']:8.2f} {r['step_speedup']:6.2f} "
              f"{r['prompt_tokens']:.0f}+{r['completion_tokens']:.0f}")
    report = {"benchmark": "main_job", "command": "python benchmarks/performance/main_job.py " + " ".join(argv or sys.argv[1:]),
              "model": args.model, "rounds": args.rounds, "max_task_steps": args.max_task_steps, "cores": cores,
              "load_average_start": [round(x, 2) for x in load_start],
              "load_average_end": [round(x, 2) for x in os.getloadavg()], "torch": torch.__version__,
              "baseline": "float32 generation and update, 1 thread (the trainer's defaults before --threads 0)", "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"saved {args.out}")
    return 0


def _setting(text: str, parser: argparse.ArgumentParser) -> tuple[str, str, int, str]:
    parts = text.split("/")
    dtypes = ("float32", "bfloat16")
    if (len(parts) != 4 or parts[0] not in dtypes or parts[1] not in dtypes or not parts[2].isdigit()
            or int(parts[2]) < 1 or parts[3] not in ("on", "off")):
        parser.error(f"--settings {text!r}: expected GEN/UPDATE/THREADS/CACHE, e.g. bfloat16/bfloat16/1/on "
                     "(dtypes float32 or bfloat16, threads >= 1, cache on or off)")
    return parts[0], parts[1], int(parts[2]), parts[3]


if __name__ == "__main__":
    sys.exit(main())
