"""CPU generation of SmolLM2-135M (the embedded default) as the trainer and the hf agent run it: torch threads
1 vs 2 (vs all cores), float32 vs bfloat16 weights, at the batch sizes a rollout uses. Side by side in one
run, interleaved (every setting once per round, `--rounds` rounds), medians; ratios to the trainer's default
(float32, 1 thread). Prints a table and saves benchmarks/results/cpu_generation.json.

    python benchmarks/performance/cpu_generation.py                  # about 5 minutes on this 2-core machine
    python benchmarks/performance/cpu_generation.py --rounds 1 --batches 2 --new-tokens 8   # a quick look

Prompts: ~480 tokens of shop text each (the size of a WebShop turn's prompt); greedy decoding of exactly
`--new-tokens` tokens (min = max), so every setting does the same work. bf16 outputs are compared with
float32's: the share of generated tokens that agree (greedy: the first disagreement changes the rest).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repo root (benchmarks/<kind>/<name>.py)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

WORDS = ("the shop sells a red jacket with two pockets and a blue hood for men size large under forty dollars "
         "find the item then click buy now check each option once before you pick the colour and the size").split()


def bf16_units() -> bool | None:
    """Whether this CPU has bfloat16 instructions (avx512_bf16 or amx_bf16 in /proc/cpuinfo, the test
    scripts/quickstart.sh makes); None where /proc/cpuinfo cannot be read."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    return "avx512_bf16" in flags or "amx_bf16" in flags


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--batches", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--prompt-words", type=int, default=380)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "cpu_generation.json"),
                        help="where the JSON goes (default: benchmarks/results/cpu_generation.json)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from skillrise_gym.models import load_model_and_tokenizer

    model32, tokenizer = load_model_and_tokenizer(args.model)
    model32.eval()
    model16 = load_model_and_tokenizer(args.model)[0].to(torch.bfloat16).eval()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    thread_counts = sorted({1, min(2, cores), cores})
    settings = [(dtype, threads) for dtype in ("float32", "bfloat16") for threads in thread_counts]
    tokenizer.padding_side = "left"
    texts = [" ".join(WORDS[(i * 7) % len(WORDS):] + WORDS * 20)[: args.prompt_words * 6] for i in range(max(args.batches))]
    timings: dict[str, list[float]] = {}
    outputs: dict[str, list[list[int]]] = {}
    prompt_tokens = {}
    for round_ in range(args.rounds):
        for batch in args.batches:
            enc = tokenizer(texts[:batch], return_tensors="pt", padding=True)
            prompt_tokens[batch] = int(enc["attention_mask"].sum())
            for dtype, threads in settings:
                torch.set_num_threads(threads)
                model = model32 if dtype == "float32" else model16
                key = f"{dtype}/threads{threads}/batch{batch}"
                started = time.perf_counter()
                with torch.inference_mode():
                    out = model.generate(**enc, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                         do_sample=False, pad_token_id=tokenizer.pad_token_id)
                timings.setdefault(key, []).append(time.perf_counter() - started)
                outputs[key] = out[:, enc["input_ids"].shape[1]:].tolist()
                print(f"round {round_ + 1}: {key}: {timings[key][-1]:.2f} s", flush=True)
    rows = []
    for batch in args.batches:
        base = statistics.median(timings[f"float32/threads1/batch{batch}"])
        reference = outputs[f"float32/threads1/batch{batch}"]
        for dtype, threads in settings:
            key = f"{dtype}/threads{threads}/batch{batch}"
            seconds = statistics.median(timings[key])
            same = sum(a == b for ra, rb in zip(outputs[key], reference) for a, b in zip(ra, rb))
            rows.append({"batch": batch, "dtype": dtype, "threads": threads, "seconds": round(seconds, 3),
                         "all_seconds": [round(t, 3) for t in timings[key]],
                         "speedup_vs_float32_1_thread": round(base / seconds, 2),
                         "completion_tokens_per_s": round(batch * args.new_tokens / seconds, 1),
                         "tokens_agreeing_with_float32": round(same / (batch * args.new_tokens), 3),
                         "prompt_tokens": prompt_tokens[batch]})
    print(f"\n{'batch':>5} {'dtype':>9} {'threads':>7} {'median s':>9} {'speed-up':>9} {'tok/s':>7} {'agree':>6}")
    for r in rows:
        print(f"{r['batch']:>5} {r['dtype']:>9} {r['threads']:>7} {r['seconds']:>9.2f} "
              f"{r['speedup_vs_float32_1_thread']:>8.2f}x {r['completion_tokens_per_s']:>7.1f} "
              f"{r['tokens_agreeing_with_float32']:>6.2f}")
    report = {"benchmark": "cpu_generation", "command": "python benchmarks/performance/cpu_generation.py " + " ".join(argv or sys.argv[1:]),
              "model": args.model, "new_tokens": args.new_tokens, "rounds": args.rounds, "cores": cores,
              "machine": {"cpu": platform.processor() or platform.machine(), "load_average_at_end": os.getloadavg(),
                          # what decides bfloat16's speed here: native bf16 units, or emulation on AVX2/AVX-512
                          "bf16_units": bf16_units(), "kernels": torch.backends.cpu.get_cpu_capability()},
              "torch": torch.__version__, "rows": rows,
              "note": "medians of interleaved rounds; greedy decoding of exactly new_tokens tokens"}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
