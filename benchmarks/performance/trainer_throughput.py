"""Update throughput: skillrise-train's update vs stock `GRPOTrainer`'s on identical rows.

Agent turns have long prompts and short completions. Stock TRL scores every position through its fused LM
head when Triton is unavailable (CPU); `SkillRiseTrainer` asks the model for the completion positions only.
A step's rows also share long prompt prefixes (a trial's turns, a group's first turns): the "shared" variant
runs each shared prefix once (skillrise_train/shared_prefix.py, `--share-prefixes`, on by default); "ours" is
the same trainer without it. Every variant runs the trainer's `compute_loss` (token-budget micro-batches,
TRL's `_compute_loss` on each: clipped objective, entropy bonus) and the backward pass on the same rows, each
in its own process so peak memory is measured separately. Random rows share nothing (there "shared" is
"ours"); `--rows-from` scores a recorded step's turns.

    python benchmarks/performance/trainer_throughput.py                      # SmolLM2-135M, 4 rows of ~800+32 tokens
    python benchmarks/performance/trainer_throughput.py --rows-from benchmarks/data/main_job_turns.jsonl --rows 12 \
        --repeats 1 --rounds 2 --out benchmarks/results/trainer_throughput_main_job.json   # the main job's rows
    python benchmarks/performance/trainer_throughput.py --rounds 3 --precisions float32 bfloat16   # interleaved, both
    python benchmarks/performance/trainer_throughput.py --model tiny --repeats 3

`--rounds` runs the variants alternately (stock, ours, shared, stock, ...), each round in fresh processes, and
reports the median over every timed update of every round; `--precisions bfloat16` autocasts both variants'
update as `--bf16` does (TRL's own path and ours alike). Prints tokens/s (row tokens: the same count for
every variant) and peak memory of each and their ratios; saves JSON (medians) to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


#: stock: TRL's log-prob path (every position scored); ours: completion positions only, no shared
#: prefixes (--no-share-prefixes); shared: ours with the update's shared prompt prefixes (shared_prefix.py)
VARIANTS = ("stock", "ours", "shared")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def _current_rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_variant(variant: str, args: argparse.Namespace) -> dict:
    """One variant in this process: build the trainer, time `repeats` loss+backward passes on fixed rows."""
    import torch
    from trl import GRPOTrainer

    from skillrise_train.config import TrainConfig
    from skillrise_train.trainer import SkillRiseTrainer

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    class StockUpdate(SkillRiseTrainer):
        """The same trainer with TRL's own log-prob path (every position scored)."""

        _get_per_token_logps_and_entropies = GRPOTrainer._get_per_token_logps_and_entropies

    cls = StockUpdate if variant == "stock" else SkillRiseTrainer
    with tempfile.TemporaryDirectory() as out:
        config = TrainConfig(env="toy", model=args.model, lora=args.lora, output_dir=out, steps=1,
                             max_new_tokens=args.completion_tokens, threads=args.threads,
                             bf16=args.precision == "bfloat16", share_prefixes=variant == "shared")
        trainer = cls.from_config(config)
        trainer.current_gradient_accumulation_steps = 1
        model = trainer.model
        model.train()
        vocab = model.config.vocab_size
        g = torch.Generator().manual_seed(1)
        if args.rows_from:  # a recorded step's turns: prompts as the trainer encodes them, completions as sampled
            turns = [json.loads(line) for line in Path(args.rows_from).read_text().splitlines() if line.strip()]
            turns = turns[:args.rows] if args.rows else turns
            prompts = [trainer.encode_prompt(t["prompt"])[0] for t in turns]
            completions = [trainer.processing_class.encode(t["response"], add_special_tokens=False)
                           [:args.completion_tokens] for t in turns]
        else:
            rows = args.rows or 4
            prompts = [torch.randint(10, vocab, (args.prompt_tokens - 37 * i,), generator=g).tolist()
                       for i in range(rows)]
            completions = [torch.randint(10, vocab, (args.completion_tokens - i % 3,), generator=g).tolist()
                           for i in range(rows)]
        advantages = [(-1.0) ** i * (1 + i / 10) for i in range(len(prompts))]
        batch = trainer.rows_to_batch(prompts, completions, advantages)
        tokens = int(batch["prompt_mask"].sum() + batch["completion_mask"].sum())
        device = trainer.accelerator.device
        cuda = device.type == "cuda"

        def update() -> float:
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            model.zero_grad(set_to_none=True)
            loss = trainer.compute_loss(model, batch)  # the real update path (token-budget micro-batches)
            loss.backward()
            if cuda:
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
            update.last_loss = float(loss.detach())
            return elapsed

        update()  # warm-up
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        rss_before = _current_rss_mb()
        times = [update() for _ in range(args.repeats)]
        trainer.rollout.close()
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else _peak_rss_mb()
    return {
        "variant": variant,
        "device": str(device),
        "rows": len(prompts),
        "tokens_per_update": tokens,
        "update_tokens_run": (trainer._metrics["train"].get("update/tokens_run") or [None])[-1],
        "seconds": times,
        "median_seconds": statistics.median(times),
        "tokens_per_s": tokens / statistics.median(times),
        "peak_memory_mb": peak,
        "memory_kind": "cuda max allocated" if cuda else "process peak RSS",
        "rss_before_mb": rss_before,
        "loss": update.last_loss,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--rows", type=int, default=None,
                        help="rows per update: random rows (default 4), or the first ROWS turns of --rows-from (default all)")
    parser.add_argument("--prompt-tokens", type=int, default=800)
    parser.add_argument("--completion-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lora", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--rounds", type=int, default=1, help="alternate the variants this many times")
    parser.add_argument("--precisions", nargs="+", choices=["float32", "bfloat16"], default=["float32"],
                        help="the update's precision (bfloat16: autocast, as --bf16)")
    parser.add_argument("--precision", choices=["float32", "bfloat16"], default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--rows-from", default=None, metavar="TURNS_JSONL",
                        help="score these recorded turns (turns.jsonl) instead of --rows random rows, e.g. "
                             "benchmarks/data/main_job_turns.jsonl (the main job's first step, 22 rows)")
    parser.add_argument("--out", default="benchmarks/results/trainer_throughput.json",
                        help="where the JSON (medians) goes (default: %(default)s; the main job's rows: "
                             "benchmarks/results/trainer_throughput_main_job.json)")
    parser.add_argument("--variant", choices=list(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.variant:  # child process
        result = run_variant(args.variant, args)
        Path(args.result_file).write_text(json.dumps(result))
        return 0

    if args.rounds < 1 or (args.rows is not None and args.rows < 1):
        parser.error("--rounds and --rows must be >= 1")
    if args.rows_from and not Path(args.rows_from).is_file():
        parser.error(f"--rows-from {args.rows_from}: no such file")
    runs: dict[tuple[str, str], list[dict]] = {(p, v): [] for p in args.precisions for v in VARIANTS}
    for _round in range(args.rounds):
        for precision in args.precisions:
            for variant in VARIANTS:
                with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
                    result_file = handle.name
                child = [sys.executable, __file__, "--variant", variant, "--result-file", result_file,
                         "--precision", precision]
                for name in ("model", "rows", "prompt_tokens", "completion_tokens", "repeats", "threads"):
                    if getattr(args, name) is not None:
                        child += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
                child.append("--lora" if args.lora else "--no-lora")
                child += ["--rows-from", args.rows_from] if args.rows_from else []
                subprocess.run(child, check=True)
                runs[precision, variant].append(json.loads(Path(result_file).read_text()))
                os.unlink(result_file)
    summary = {"benchmark": "trainer_throughput", "command": "python benchmarks/performance/trainer_throughput.py "
               + " ".join(argv if argv is not None else sys.argv[1:]), "model": args.model, "lora": args.lora,
               "rows": args.rows, "rows_from": args.rows_from, "prompt_tokens": args.prompt_tokens, "completion_tokens": args.completion_tokens,
               "repeats": args.repeats, "rounds": args.rounds, "threads": args.threads,
               "load_average": [round(x, 2) for x in os.getloadavg()], "precisions": {}}
    print(f"{'precision':>9s} | {'variant':>8s} | {'tokens/s':>10s} | {'median s':>9s} | {'peak MB':>9s} | loss")
    for precision in args.precisions:
        merged = {}
        for variant in VARIANTS:
            results = runs[precision, variant]
            seconds = [t for r in results for t in r["seconds"]]
            merged[variant] = {**results[-1], "seconds": seconds, "median_seconds": statistics.median(seconds),
                               "tokens_per_s": results[-1]["tokens_per_update"] / statistics.median(seconds),
                               "peak_memory_mb": max(r["peak_memory_mb"] for r in results),
                               "round_medians": [r["median_seconds"] for r in results]}
            r = merged[variant]
            print(f"{precision:>9s} | {variant:>8s} | {r['tokens_per_s']:>10.0f} | {r['median_seconds']:>9.3f} | "
                  f"{r['peak_memory_mb']:>9.0f} | {r['loss']:.6f}")
        ours, stock, shared = merged["ours"], merged["stock"], merged["shared"]
        summary["precisions"][precision] = {
            "stock": stock, "ours": ours, "shared": shared,
            "speedup_tokens_per_s": ours["tokens_per_s"] / stock["tokens_per_s"],
            "peak_memory_ratio_ours_over_stock": ours["peak_memory_mb"] / stock["peak_memory_mb"],
            "loss_abs_difference": abs(ours["loss"] - stock["loss"]),
            "shared_speedup_over_stock": shared["tokens_per_s"] / stock["tokens_per_s"],
            "shared_speedup_over_ours": shared["tokens_per_s"] / ours["tokens_per_s"],
            "peak_memory_ratio_shared_over_stock": shared["peak_memory_mb"] / stock["peak_memory_mb"],
            "shared_loss_abs_difference": abs(shared["loss"] - stock["loss"]),
        }
        row = summary["precisions"][precision]
        print(f"{precision}: speedup (ours/stock tokens/s) {row['speedup_tokens_per_s']:.2f}x; peak memory "
              f"ours/stock {row['peak_memory_ratio_ours_over_stock']:.2f} ({ours['memory_kind']}); |loss "
              f"difference| {row['loss_abs_difference']:.2e}")
        print(f"{precision}: shared prefixes (tokens run {shared['update_tokens_run'] or 1:.2f} of all): "
              f"{row['shared_speedup_over_stock']:.2f}x stock, {row['shared_speedup_over_ours']:.2f}x ours "
              f"without; peak memory shared/stock {row['peak_memory_ratio_shared_over_stock']:.2f}; |loss "
              f"difference| {row['shared_loss_abs_difference']:.2e}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
