"""GPU smoke check of skillrise-train: generation and update throughput, and one real training step per env and
algorithm, on a randomly initialised model of SmolLM2-135M's shape, inside a hard time budget.

    bash scripts/gpu_check.sh --prepare            # on the CPU box: wheels + the SmolLM2 tokenizer -> gpu_wheels/
    bash scripts/gpu_check.sh                      # on the GPU machine (device tool, carry ["gpu_wheels"])
    python benchmarks/performance/gpu_check.py --rehearse --out benchmarks/results/gpu_check_cpu_rehearsal.json
                                                   # CPU dry run of every code path, tiny sizes, a few minutes
    python benchmarks/performance/gpu_check.py --summarise benchmarks/results/gpu_check.json

No weights travel and nothing is downloaded: the model is `LlamaForCausalLM` built from the converted SmolLM2's
config.json (hidden 576, 30 layers, 9 heads, 3 kv heads, intermediate 1536, vocab 49152, tied embeddings,
8192 positions, rope theta 1e5; checked, mismatches noted), randomly initialised (seed 0), saved in bfloat16 as
a Hugging Face folder with the shipped SmolLM2 tokenizer, so `skillrise-train --model <folder>` loads it. Its
answers are noise: the figures are costs, not learning. `--rehearse` uses the same width with 2 layers.

Parts, each timed, guarded by the budget (a part that would start with less time left than its minimum is
skipped with a note; the process stops itself, JSON written, 20 s after the budget) and saved to the JSON as
soon as it ends; a part that fails records its exception and the next one runs:

- ``model``: build and save the random model.
- ``trainer``: `SkillRiseTrainer.from_config` on that folder (env toy, LoRA, bf16 on a GPU), shared by:
- ``generation``: `SkillRiseTrainer.generate_completions` with one seed per prompt (the seeded sampler the
  rollouts use) for batches of 1, 8, 32, 64, 128 prompts of ~500 tokens, 32 new tokens, under the
  accelerator's autocast (bf16 on a GPU, as in training); completion tokens/s and peak GPU memory per batch
  size; plus TRL's own unseeded path at the largest batch for reference.
- ``update``: `trainer.compute_loss` + backward on 32 rows of ~800 + 32 tokens, as
  benchmarks/performance/trainer_throughput.py does, at micro_batch_tokens 1024 (the CPU default), 4096, 32768 and -1 (auto: sized from the GPU's memory); then the main job's recorded rows with --share-prefixes off and on; tokens/s, peak
  memory.
- ``train/<env>/<algo>``: `skillrise_train.cli.run(TrainConfig(...))`, one step (K=2, G=4, S=2, max_task_steps
  3, max_new_tokens 32, LoRA, bf16) on rulebook and webshop (the generated catalog), skillrise and grpo;
  wall seconds, the step's metrics.jsonl line, peak memory.

Memory: `torch.cuda.max_memory_allocated` (and reserved), reset before each part (and each batch size); on a
CPU the process's peak RSS so far (it never goes down, so later parts repeat earlier peaks).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import random
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]  # the repo root (benchmarks/<kind>/<name>.py)
DEFAULT_SHAPE_DIR = ROOT / "gpu_wheels" / "smollm2-shape"
#: SmolLM2-135M's shape, as the brief states it; checked against the converted model's config.json
EXPECTED_SHAPE = {"architectures": ["LlamaForCausalLM"], "hidden_size": 576, "num_hidden_layers": 30,
                  "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152,
                  "tie_word_embeddings": True, "max_position_embeddings": 8192, "rope_theta": 100000.0}
HARD_STOP_GRACE_S = 20.0
TRAIN_RUNS = (("rulebook", "skillrise"), ("webshop", "grpo"), ("webshop", "skillrise"), ("rulebook", "grpo"))
WORDS = ("the shop sells a red jacket with two pockets and a blue hood for men size large under forty dollars "
         "find the item then click buy now check each option once before you pick the colour and the size of "
         "the bin glass goes in the green one paper in the yellow one keep notes short and act on them").split()
UNITS = {
    "seconds": "s (wall clock, after torch.cuda.synchronize on a GPU)",
    "*_tokens_per_s": "tokens per second",
    "peak_memory_mib": "MiB: torch.cuda.max_memory_allocated since the part (or batch size) began; on a CPU the "
                       "process's peak RSS so far",
    "peak_reserved_mib": "MiB: torch.cuda.max_memory_reserved",
    "prompt_tokens_mean": "tokens per prompt after the chat template",
}


# ------------------------------------------------------------------------------------------------ settings
def sizes(rehearse: bool) -> dict[str, Any]:
    """What each part measures: the GPU sizes, or tiny CPU ones that run every code path in a few minutes."""
    if rehearse:
        return {"layers": 2, "batch_sizes": [1, 4], "prompt_tokens": 100, "new_tokens": 8, "gen_repeats": 1,
                "gen_warmup": False, "update_rows": 2, "update_prompt_tokens": 120, "update_repeats": 1,
                "micro_batch_tokens": [1024, 0, -1],
                "train": {"K": 2, "G": 2, "S": 1, "max_task_steps": 3, "max_new_tokens": 8},
                "part_caps_s": {"generation": 120, "update": 120}}
    return {"layers": None, "batch_sizes": [1, 8, 32, 64, 128], "prompt_tokens": 500, "new_tokens": 32,
            "gen_repeats": 2, "gen_warmup": True, "update_rows": 32, "update_prompt_tokens": 800, "update_repeats": 3,
            "micro_batch_tokens": [1024, 4096, 32768, -1],
            "train": {"K": 2, "G": 4, "S": 2, "max_task_steps": 3, "max_new_tokens": 32},
            "part_caps_s": {"generation": 80, "update": 45}}


#: least time (s) a part is started with; the estimates of a warm H200 run, doubled
MIN_PART_S = {"model": 10, "trainer": 10, "generation": 15, "update": 10, "train": 20}


# ------------------------------------------------------------------------------------------------ report
class Report:
    """The JSON result, saved (atomically) after every part; a watchdog thread saves it and ends the process
    when the hard budget (budget + HARD_STOP_GRACE_S) is exceeded."""

    def __init__(self, path: Path, budget_s: float, rehearse: bool, argv: list[str]) -> None:
        self.path = path
        self.started = time.perf_counter()
        self.budget_s = budget_s
        self.current = "startup"
        self.lock = threading.Lock()
        self.data: dict[str, Any] = {
            "benchmark": "gpu_check",
            "cpu_rehearsal": rehearse,
            "command": "python benchmarks/performance/gpu_check.py " + " ".join(argv),
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "budget_s": budget_s,
            "hard_stop_s": budget_s + HARD_STOP_GRACE_S,
            "units": UNITS,
            "notes": [],
            "parts": {},
        }

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def remaining(self) -> float:
        return self.budget_s - self.elapsed

    def note(self, text: str) -> None:
        print(f"gpu_check: {text}", flush=True)
        self.data["notes"].append(text)

    def save(self) -> None:
        self.data["elapsed_s"] = round(self.elapsed, 2)
        for _ in range(5):  # the other thread may be changing the dict; try again
            try:
                text = json.dumps(self.data, indent=2, default=str)
                break
            except RuntimeError:
                time.sleep(0.05)
        else:
            return
        with self.lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(text + "\n")
            os.replace(tmp, self.path)

    def start_watchdog(self) -> None:
        def watch() -> None:
            while self.elapsed < self.budget_s + HARD_STOP_GRACE_S:
                time.sleep(1.0)
            self.data["aborted"] = (f"hard time limit {self.budget_s + HARD_STOP_GRACE_S:.0f} s reached during part "
                                    f"{self.current!r}; the process stopped itself")
            part = self.data["parts"].get(self.current)
            if isinstance(part, dict) and part.get("status") == "running":
                part["status"] = "aborted"
                part["seconds"] = round(time.perf_counter() - part.pop("_t0", self.started), 2)
            print(f"gpu_check: {self.data['aborted']}", flush=True)
            self.save()
            os._exit(3)

        threading.Thread(target=watch, name="gpu_check-watchdog", daemon=True).start()

    def run_part(self, name: str, fn: Callable[[dict[str, Any]], Any], minimum_s: float) -> Any:
        """Run `fn(entry)` as part `name` unless the budget is short; record time, memory, errors."""
        left = self.remaining()
        if left < minimum_s:
            self.data["parts"][name] = {"status": "skipped",
                                        "reason": f"time budget: {left:.0f} s left, the part needs at least {minimum_s} s"}
            print(f"gpu_check: skip {name} ({left:.0f} s left)", flush=True)
            self.save()
            return None
        entry: dict[str, Any] = {"status": "running", "started_at_s": round(self.elapsed, 2)}
        self.data["parts"][name] = entry
        self.current = name
        self.save()
        print(f"gpu_check: part {name} ({left:.0f} s of budget left)", flush=True)
        t0 = time.perf_counter()
        entry["_t0"] = t0
        reset_peak()
        result = None
        try:
            result = fn(entry)
            entry["status"] = "ok"
        except Exception as exc:  # noqa: BLE001 - recorded, and the next part runs
            entry["status"] = "error"
            entry["error"] = f"{type(exc).__name__}: {exc}"[:4000]
            entry["traceback"] = traceback.format_exc()[-6000:]
            print(f"gpu_check: part {name} failed: {entry['error'][:500]}", flush=True)
        entry.pop("_t0", None)
        entry["seconds"] = round(time.perf_counter() - t0, 3)
        entry.update(peak_memory())
        print(f"gpu_check: part {name}: {entry['status']} in {entry['seconds']:.1f} s, "
              f"peak {entry.get('peak_memory_mib', 0):.0f} MiB", flush=True)
        free_memory()
        self.current = "between parts"
        self.save()
        return result


# ------------------------------------------------------------------------------------------------ helpers
def cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def sync() -> None:
    if cuda():
        import torch

        torch.cuda.synchronize()


def reset_peak() -> None:
    if cuda():
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak_memory() -> dict[str, Any]:
    if cuda():
        import torch

        return {"peak_memory_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1),
                "peak_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20, 1),
                "memory_kind": "cuda max allocated (since reset)"}
    return {"peak_memory_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
            "memory_kind": "process peak RSS so far (never resets)"}


def free_memory() -> None:
    gc.collect()
    if cuda():
        import torch

        torch.cuda.empty_cache()


def import_check() -> dict[str, Any]:
    """Each package the check needs: its version and file, or why it does not import."""
    import importlib
    import importlib.metadata as metadata

    found: dict[str, Any] = {}
    for name in ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "pyarrow", "pandas", "xxhash",
                 "dill", "multiprocess", "fsspec", "huggingface_hub", "tokenizers", "safetensors", "gymnasium",
                 "numpy", "bm25s", "rapidfuzz", "regex"):
        try:
            module = importlib.import_module(name)
            try:
                version = metadata.version({"huggingface_hub": "huggingface-hub"}.get(name, name))
            except metadata.PackageNotFoundError:
                version = getattr(module, "__version__", "?")
            found[name] = {"version": version, "file": getattr(module, "__file__", None)}
        except Exception as exc:  # noqa: BLE001
            found[name] = {"missing": f"{type(exc).__name__}: {exc}"[:500]}
    return found


def environment() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "python": platform.python_version(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
        "torch": torch.__version__, "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update({"device": torch.cuda.get_device_name(0), "device_count": torch.cuda.device_count(),
                     "capability": list(torch.cuda.get_device_capability(0)),
                     "total_memory_mib": round(props.total_memory / 2**20), "multiprocessors": props.multi_processor_count,
                     "bf16_supported": torch.cuda.is_bf16_supported()})
    else:
        info["device"] = "cpu"
    return info


# ------------------------------------------------------------------------------------------------ parts
def build_model(entry: dict[str, Any], shape_dir: Path, target: Path, layers: int | None) -> str:
    """A random LlamaForCausalLM of the shipped config's shape (`layers` overrides the depth), bf16, saved with
    the shipped tokenizer into `target`."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    shipped = json.loads((shape_dir / "config.json").read_text())
    rope = shipped.get("rope_theta", (shipped.get("rope_parameters") or {}).get("rope_theta"))
    actual = {**{k: shipped.get(k) for k in EXPECTED_SHAPE}, "rope_theta": rope}
    mismatches = {k: {"expected": v, "config_json": actual[k]} for k, v in EXPECTED_SHAPE.items()
                  if actual[k] != v and not (isinstance(v, float) and actual[k] is not None and float(actual[k]) == v)}
    entry["shape_dir"] = str(shape_dir)
    entry["shape_check"] = "matches SmolLM2-135M" if not mismatches else mismatches
    config = LlamaConfig.from_pretrained(str(shape_dir))
    if layers:
        config.num_hidden_layers = layers
    torch.manual_seed(0)
    device = torch.device("cuda" if cuda() else "cpu")
    with device:
        model = LlamaForCausalLM(config)
    model.to(torch.bfloat16)
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(target))
    tokenizer = AutoTokenizer.from_pretrained(str(shape_dir), local_files_only=True)
    tokenizer.save_pretrained(str(target))
    for name in ("generation_config.json", "chat_template.jinja"):
        if (shape_dir / name).is_file() and not (target / name).is_file():
            shutil.copy(shape_dir / name, target / name)
    entry.update({
        "path": str(target), "parameters": model.num_parameters(), "saved_dtype": "bfloat16",
        "init_device": str(device), "layers": config.num_hidden_layers, "hidden_size": config.hidden_size,
        "vocab_size": config.vocab_size, "tie_word_embeddings": bool(config.tie_word_embeddings),
        "weights_mib": round(sum(f.stat().st_size for f in target.glob("*.safetensors")) / 2**20, 1),
        "files": sorted(p.name for p in target.iterdir()),
    })
    del model
    return str(target)


def make_trainer(entry: dict[str, Any], model_dir: str, out: str, new_tokens: int) -> Any:
    """The trainer that the generation and update parts measure (env toy: no env cost)."""
    import torch

    from skillrise_train.config import TrainConfig
    from skillrise_train.trainer import SkillRiseTrainer

    config = TrainConfig(env="toy", model=model_dir, lora=True, bf16=True, output_dir=out, steps=1,
                         max_new_tokens=new_tokens, threads=1, record_turns=False)
    trainer = SkillRiseTrainer.from_config(config)
    params = list(trainer.model.parameters())
    entry.update({
        "device": str(trainer.accelerator.device), "mixed_precision": str(trainer.accelerator.mixed_precision),
        "param_dtype": str(params[0].dtype), "trainable_parameters": sum(p.numel() for p in params if p.requires_grad),
        "parameters": sum(p.numel() for p in params), "prompt_style": trainer.rollout.prompt_style,
        "max_prompt_tokens": trainer.max_prompt_tokens, "torch_threads": torch.get_num_threads(),
    })
    return trainer


def make_prompts(trainer: Any, count: int, target_tokens: int, seed: int) -> tuple[list[str], list[int]]:
    """`count` distinct prompts of about `target_tokens` tokens each (after the chat template)."""
    rng = random.Random(seed)
    probe = " ".join(rng.choice(WORDS) for _ in range(target_tokens))
    ids, _ = trainer.encode_prompt(probe)
    words = max(1, round(target_tokens * target_tokens / max(1, len(ids))))
    prompts = [" ".join(rng.choice(WORDS) for _ in range(words)) for _ in range(count)]
    return prompts, [len(trainer.encode_prompt(p)[0]) for p in prompts]


def measure_generation(entry: dict[str, Any], trainer: Any, size: dict[str, Any], report: Report) -> None:
    """Seeded generation (the rollouts' path) against batch size, under the accelerator's autocast."""
    cap = size["part_caps_s"]["generation"]
    started = time.perf_counter()
    entry.update({"new_tokens": size["new_tokens"], "target_prompt_tokens": size["prompt_tokens"],
                  "repeats": size["gen_repeats"], "path": "SkillRiseTrainer.generate_completions(prompts, seeds=...)",
                  "autocast": str(trainer.accelerator.mixed_precision), "rows": []})
    biggest = max(size["batch_sizes"])
    prompts, lengths = make_prompts(trainer, biggest, size["prompt_tokens"], seed=1)
    entry["prompt_tokens_mean"] = round(statistics.mean(lengths), 1)
    autocast = trainer.accelerator.autocast

    def call(batch: list[str], seeds: list[int] | None) -> tuple[float, int]:
        sync()
        t0 = time.perf_counter()
        with autocast():
            completions = trainer.generate_completions(batch, seeds=seeds)
        sync()
        return time.perf_counter() - t0, sum(len(c.completion_ids) for c in completions)

    merged = contextlib.ExitStack()  # LoRA merged for the batch sizes' calls, as a rollout merges it (lora.py)
    merged.enter_context(trainer.generation_weights() if hasattr(trainer, "generation_weights")
                         else contextlib.nullcontext())
    warm_s, _ = call(prompts[:1], [0])  # CUDA context, kernels, LoRA wrappers
    entry["warmup_seconds"] = round(warm_s, 3)
    for batch_size in size["batch_sizes"]:
        spent = time.perf_counter() - started
        if spent > cap or report.remaining() < MIN_PART_S["update"] + 4 * MIN_PART_S["train"]:
            entry["rows"].append({"batch_size": batch_size, "skipped": f"time cap: part at {spent:.0f} s of {cap} s, "
                                  f"{report.remaining():.0f} s of budget left"})
            continue
        batch, seeds = prompts[:batch_size], list(range(batch_size))
        row: dict[str, Any] = {"batch_size": batch_size}
        try:
            if size["gen_warmup"]:
                call(batch, seeds)  # untimed: this shape's first call
            reset_peak()
            timings = [call(batch, seeds) for _ in range(size["gen_repeats"])]
            seconds = statistics.median(t for t, _ in timings)
            tokens = timings[0][1]
            prompt_tokens = sum(lengths[:batch_size])
            row.update({"seconds": round(seconds, 4), "completion_tokens": tokens,
                        "completion_tokens_per_s": round(tokens / seconds, 1),
                        "prompt_plus_completion_tokens_per_s": round((tokens + prompt_tokens) / seconds, 1),
                        "all_seconds": [round(t, 4) for t, _ in timings], **peak_memory()})
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory at one size; the others still count
            row["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        entry["rows"].append(row)
        report.save()
        print(f"  generation batch {batch_size:4d}: {row.get('completion_tokens_per_s', row.get('error'))} "
              f"completion tokens/s, peak {row.get('peak_memory_mib', 0):.0f} MiB", flush=True)
    # where one call's time goes (batch 8): the profiler's top operators by host time, and by device time
    if report.remaining() > MIN_PART_S["update"] + 4 * MIN_PART_S["train"] + 10:
        try:
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch_cuda_available() else [])
            with profile(activities=activities) as prof:
                seconds, tokens = call(prompts[:8], list(range(len(prompts[:8]))))
            table = prof.key_averages()
            entry["profile_batch8"] = {
                "seconds": round(seconds, 4), "completion_tokens": tokens,
                "by_host_time": table.table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=60),
                "by_device_time": table.table(sort_by="self_cuda_time_total", row_limit=12,
                                              max_name_column_width=60) if torch_cuda_available() else None}
            print(entry["profile_batch8"]["by_host_time"], flush=True)
        except Exception as exc:  # noqa: BLE001
            entry["profile_batch8"] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
    merged.close()
    # the same seeded calls with the LoRA adapters left unmerged (skillrise_train/lora.py), for the ratio
    done = [r for r in entry["rows"] if "seconds" in r]
    entry["unmerged"] = []
    for row in [r for r in done if r["batch_size"] in (8, biggest)] if getattr(trainer, "merge_lora_for_generation",
                                                                              None) else []:
        if report.remaining() <= MIN_PART_S["update"] + 4 * MIN_PART_S["train"]:
            break
        batch_size = row["batch_size"]
        trainer.merge_lora_for_generation = False
        try:
            seconds, tokens = call(prompts[:batch_size], list(range(batch_size)))
            entry["unmerged"].append({"batch_size": batch_size, "seconds": round(seconds, 4),
                                      "completion_tokens_per_s": round(tokens / seconds, 1),
                                      "merged_over_unmerged_speed": round(seconds / row["seconds"], 3)})
        except Exception as exc:  # noqa: BLE001
            entry["unmerged"].append({"batch_size": batch_size, "error": f"{type(exc).__name__}: {exc}"[:2000]})
        finally:
            trainer.merge_lora_for_generation = True
        print(f"  generation batch {batch_size:4d}, LoRA unmerged: {entry['unmerged'][-1]}", flush=True)
    # TRL's own (unseeded) generation path at the largest batch that ran, for reference
    if done and report.remaining() > MIN_PART_S["update"] + 4 * MIN_PART_S["train"]:
        batch_size = done[-1]["batch_size"]
        try:
            reset_peak()
            seconds, tokens = call(prompts[:batch_size], None)
            entry["trl_unseeded"] = {"batch_size": batch_size, "seconds": round(seconds, 4),
                                     "completion_tokens": tokens,
                                     "completion_tokens_per_s": round(tokens / seconds, 1), **peak_memory()}
        except Exception as exc:  # noqa: BLE001
            entry["trl_unseeded"] = {"batch_size": batch_size, "error": f"{type(exc).__name__}: {exc}"[:2000]}


def torch_cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def measure_update(entry: dict[str, Any], trainer: Any, size: dict[str, Any], report: Report) -> None:
    """`compute_loss` + backward on fixed rows (benchmarks/performance/trainer_throughput.py's approach), per token budget."""
    import torch

    cap = size["part_caps_s"]["update"]
    started = time.perf_counter()
    trainer.current_gradient_accumulation_steps = 1
    model = trainer.model
    model.train()
    rows, prompt_tokens, completion_tokens = size["update_rows"], size["update_prompt_tokens"], size["new_tokens"]
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(10, vocab, (prompt_tokens - (37 * i) % (prompt_tokens // 2),), generator=g).tolist()
               for i in range(rows)]
    completions = [torch.randint(10, vocab, (completion_tokens - i % 3,), generator=g).tolist() for i in range(rows)]
    advantages = [(-1.0) ** i * (1 + i / 10) for i in range(rows)]
    batch = trainer.rows_to_batch(prompts, completions, advantages)
    tokens = int(batch["prompt_mask"].sum() + batch["completion_mask"].sum())
    entry.update({"rows": rows, "prompt_tokens_max": prompt_tokens, "completion_tokens_max": completion_tokens,
                  "tokens_per_update": tokens, "repeats": size["update_repeats"], "lora": True,
                  "autocast": str(trainer.accelerator.mixed_precision),
                  "path": "trainer.compute_loss(model, batch) + loss.backward() (token-budget micro-batches)",
                  "budgets": []})

    def update(rows: dict[str, Any] = batch) -> tuple[float, float]:
        sync()
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        with trainer.accelerator.autocast():
            loss = trainer.compute_loss(model, rows)
        loss.backward()
        sync()
        return time.perf_counter() - t0, float(loss.detach())

    original = trainer.config.micro_batch_tokens
    try:
        for budget in size["micro_batch_tokens"]:
            spent = time.perf_counter() - started
            if spent > cap or report.remaining() < 4 * MIN_PART_S["train"]:
                entry["budgets"].append({"micro_batch_tokens": budget, "skipped": f"time cap ({spent:.0f} s spent)"})
                continue
            trainer.config.micro_batch_tokens = budget
            row: dict[str, Any] = {"micro_batch_tokens": budget, "micro_batches": len(trainer.pack_rows(batch))}
            if budget < 0:
                row["auto_micro_batch_tokens"] = trainer.auto_micro_batch_tokens
            try:
                update()  # warm-up
                reset_peak()
                runs = [update() for _ in range(size["update_repeats"])]
                seconds = statistics.median(t for t, _ in runs)
                row.update({"seconds": round(seconds, 4), "all_seconds": [round(t, 4) for t, _ in runs],
                            "update_tokens_per_s": round(tokens / seconds, 1), "loss": runs[-1][1], **peak_memory()})
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            entry["budgets"].append(row)
            report.save()
            print(f"  update micro_batch_tokens {budget}: {row.get('update_tokens_per_s', row.get('error'))} tokens/s, "
                  f"peak {row.get('peak_memory_mib', 0):.0f} MiB", flush=True)
        # the main job's recorded rows (they share prompt prefixes): the update with and without sharing them
        spent = time.perf_counter() - started
        if spent > cap or report.remaining() < 4 * MIN_PART_S["train"]:
            entry["shared_prefixes"] = {"skipped": f"time cap ({spent:.0f} s spent)"}
        else:
            entry["shared_prefixes"] = measure_shared_prefixes(trainer, update, size)
            report.save()
    finally:
        trainer.config.micro_batch_tokens = original
        model.zero_grad(set_to_none=True)


def measure_shared_prefixes(trainer: Any, update: Any, size: dict[str, Any]) -> dict[str, Any]:
    """`update` (on `trainer`'s batch, rebound here) on the main job's first step (benchmarks/data/
    main_job_turns.jsonl, 22 turns sharing prompt prefixes) at the auto token budget, `--share-prefixes` off
    and on: on a GPU the plan's smaller micro-batches may cost more than its saved tokens."""
    turns = [json.loads(line) for line in (ROOT / "benchmarks" / "data" / "main_job_turns.jsonl").read_text().splitlines()
             if line.strip()]
    prompts = [trainer.encode_prompt(t["prompt"])[0] for t in turns]
    completions = [trainer.processing_class.encode(t["response"], add_special_tokens=False)[:size["new_tokens"]]
                   for t in turns]
    batch = trainer.rows_to_batch(prompts, completions, [(-1.0) ** i for i in range(len(turns))])
    tokens = int(batch["prompt_mask"].sum() + batch["completion_mask"].sum())
    out: dict[str, Any] = {"rows": len(turns), "tokens_per_update": tokens, "micro_batch_tokens": -1}
    saved = (trainer.config.micro_batch_tokens, trainer.config.share_prefixes)
    trainer.config.micro_batch_tokens = -1
    try:
        for share in (False, True):
            trainer.config.share_prefixes = share
            plan = trainer.prefix_plan(batch)
            plain_tokens, run_tokens = plan.tokens() if plan else (1, 1)
            key = "shared" if share else "plain"
            try:
                update(batch)  # warm-up
                reset_peak()
                runs = [update(batch) for _ in range(size["update_repeats"])]
                seconds = statistics.median(t for t, _ in runs)
                out[key] = {"seconds": round(seconds, 4), "update_tokens_per_s": round(tokens / seconds, 1),
                            "micro_batches": len(plan.groups) if plan else len(trainer.pack_rows(batch)),
                            "tokens_run": round(run_tokens / plain_tokens, 3),
                            "loss": runs[-1][1], **peak_memory()}
            except Exception as exc:  # noqa: BLE001
                out[key] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            print(f"  update, main job rows, share_prefixes={share}: "
                  f"{out[key].get('update_tokens_per_s', out[key].get('error'))} tokens/s", flush=True)
    finally:
        trainer.config.micro_batch_tokens, trainer.config.share_prefixes = saved
    if "seconds" in out.get("plain", {}) and "seconds" in out.get("shared", {}):
        out["speedup_shared_over_plain"] = round(out["plain"]["seconds"] / out["shared"]["seconds"], 3)
    return out


def train_step(entry: dict[str, Any], env: str, algo: str, model_dir: str, out_root: Path,
               size: dict[str, Any]) -> None:
    """One real `skillrise-train` step (cli.run) on `env` with `algo`."""
    from skillrise_train.cli import run
    from skillrise_train.config import TrainConfig

    out = out_root / f"{env}-{algo}"
    shutil.rmtree(out, ignore_errors=True)
    settings = dict(size["train"])
    config = TrainConfig(env=env, algo=algo, model=model_dir, lora=True, bf16=True, steps=1, seed=0, threads=1,
                         output_dir=str(out), **settings)
    entry["config"] = {"env": env, "algo": algo, "lora": True, "bf16": True, "steps": 1, **settings,
                       "backend_options": dict(config.backend_options)}
    t0 = time.perf_counter()
    summary = run(config)
    entry["wall_seconds"] = round(time.perf_counter() - t0, 2)
    entry["run_summary"] = {k: summary.get(k) for k in ("steps", "wall_seconds", "report")}
    metrics = out / "metrics.jsonl"
    lines = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.exists() else []
    entry["metrics_lines"] = len(lines)
    entry["metrics"] = lines[-1] if lines else None
    entry["outputs"] = sorted(p.name for p in out.iterdir()) if out.exists() else []


# ------------------------------------------------------------------------------------------------ summary
def summarise(path: Path) -> str:
    """A few lines from a gpu_check JSON (what scripts/gpu_check.sh prints at the end)."""
    data = json.loads(path.read_text())
    env = data.get("environment", {})
    lines = [f"gpu_check summary ({path}): {'CPU REHEARSAL' if data.get('cpu_rehearsal') else 'device run'}, "
             f"{env.get('device', '?')}, torch {env.get('torch', '?')} (cuda {env.get('torch_cuda')}), "
             f"elapsed {data.get('elapsed_s')} s of budget {data.get('budget_s')} s"]
    versions = {k: v.get("version", "MISSING") for k, v in data.get("imports", {}).items()}
    lines.append("  versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    missing = [k for k, v in data.get("imports", {}).items() if "missing" in v]
    if missing:
        lines.append("  MISSING imports: " + "; ".join(f"{k}: {data['imports'][k]['missing']}" for k in missing))
    if data.get("aborted"):
        lines.append(f"  ABORTED: {data['aborted']}")
    for name, part in data.get("parts", {}).items():
        status = part.get("status")
        head = f"  {name:24s} {status:8s} {part.get('seconds', 0):7.1f} s  peak {part.get('peak_memory_mib', 0):8.0f} MiB"
        if status == "error":
            head += f"  {part.get('error', '')[:300]}"
        if status == "skipped":
            head += f"  {part.get('reason', '')}"
        if name.startswith("train/") and part.get("metrics"):
            m = part["metrics"]
            head += (f"  loss {m.get('loss', float('nan')):.4f}, step {m.get('step_seconds', 0):.1f} s, "
                     f"gen {m.get('generation_tokens_per_s', 0):.0f} tok/s")
        lines.append(head)
        for row in part.get("rows", []) if name == "generation" else []:
            lines.append(f"      batch {row['batch_size']:4d}: " + (
                f"{row['completion_tokens_per_s']:9.1f} completion tok/s, {row['seconds']:.3f} s, "
                f"peak {row['peak_memory_mib']:.0f} MiB" if "seconds" in row else str(row.get("error") or row.get("skipped"))))
        if name == "generation" and part.get("trl_unseeded"):
            ref = part["trl_unseeded"]
            lines.append(f"      TRL unseeded, batch {ref.get('batch_size')}: "
                         f"{ref.get('completion_tokens_per_s', ref.get('error'))} completion tok/s")
        for row in part.get("unmerged", []) if name == "generation" else []:
            lines.append(f"      LoRA unmerged, batch {row['batch_size']}: {row.get('completion_tokens_per_s', row.get('error'))} "
                         f"completion tok/s (merged is {row.get('merged_over_unmerged_speed')}x)")
        for row in part.get("budgets", []) if name == "update" else []:
            auto = f" (auto: {row['auto_micro_batch_tokens']})" if "auto_micro_batch_tokens" in row else ""
            lines.append(f"      micro_batch_tokens {row['micro_batch_tokens']:6d}{auto}: " + (
                f"{row['update_tokens_per_s']:9.1f} tok/s, {row['seconds']:.3f} s, peak {row['peak_memory_mib']:.0f} MiB"
                if "seconds" in row else str(row.get("error") or row.get("skipped"))))
    for note in data.get("notes", []):
        lines.append(f"  note: {note}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="benchmarks/results/gpu_check.json",
                        help="where the JSON goes, written as each part ends (default: %(default)s)")
    parser.add_argument("--rehearse", action="store_true", help="CPU dry run: 2 layers, tiny sizes")
    parser.add_argument("--budget-s", type=float, default=300.0, help="total time budget (s); hard stop 20 s later")
    parser.add_argument("--shape-dir", default=None,
                        help="config + tokenizer of SmolLM2 (default gpu_wheels/smollm2-shape, else the converted model)")
    parser.add_argument("--work-dir", default=None, help="model and run outputs (default: a temporary folder)")
    parser.add_argument("--parts", default="model,trainer,generation,update,train",
                        help="comma-separated subset of model,trainer,generation,update,train")
    parser.add_argument("--summarise", metavar="JSON", help="print the summary of a result file and exit")
    args = parser.parse_args(argv)
    if args.summarise:
        print(summarise(Path(args.summarise)))
        return 0
    for name, value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"),
                        ("TOKENIZERS_PARALLELISM", "false")):
        os.environ.setdefault(name, value)
    sys.path.insert(0, str(ROOT))
    report = Report(Path(args.out), args.budget_s, args.rehearse, argv)
    report.start_watchdog()
    size = sizes(args.rehearse)
    report.data["sizes"] = size
    wanted = set(args.parts.split(","))
    report.data["imports"] = import_check()
    missing = [k for k, v in report.data["imports"].items() if "missing" in v]
    if missing:
        report.note("missing imports: " + ", ".join(missing) + " (see imports); parts that need them will fail")
    try:
        report.data["environment"] = environment()
    except Exception as exc:  # noqa: BLE001 - no torch: nothing to measure
        report.data["environment"] = {"error": f"{type(exc).__name__}: {exc}"}
        report.note("torch does not import; nothing measured")
        report.save()
        return 2
    if not args.rehearse and not cuda():
        report.note("no CUDA device: these are CPU figures at the GPU sizes (use --rehearse for a CPU dry run)")
    report.data["versions"] = {k: v.get("version") for k, v in report.data["imports"].items()}
    report.save()

    shape_dir = Path(args.shape_dir) if args.shape_dir else DEFAULT_SHAPE_DIR
    if not (shape_dir / "config.json").is_file() and not args.shape_dir:
        try:  # here, without --prepare: the converted model's folder (its config and tokenizer only are read)
            from skillrise_gym.models import resolve_model_path

            shape_dir = Path(resolve_model_path("smollm2"))
            report.note(f"{DEFAULT_SHAPE_DIR} missing; config and tokenizer read from {shape_dir}")
        except Exception as exc:  # noqa: BLE001
            report.note(f"no SmolLM2 config/tokenizer: {DEFAULT_SHAPE_DIR} missing and smollm2 unresolved ({exc})")
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="gpu_check_"))
    work.mkdir(parents=True, exist_ok=True)
    report.data["work_dir"] = str(work)
    model_dir = str(work / "random-smollm2-shape")

    if "model" in wanted:
        built = report.run_part("model", lambda e: build_model(e, shape_dir, Path(model_dir), size["layers"]),
                                MIN_PART_S["model"])
        if built is None:
            report.note("the model was not built; the parts that load it will fail")
    holder: dict[str, Any] = {}
    if wanted & {"trainer", "generation", "update"}:
        holder["trainer"] = report.run_part(
            "trainer", lambda e: make_trainer(e, model_dir, str(work / "toy-trainer"), size["new_tokens"]),
            MIN_PART_S["trainer"])
    trainer = holder.get("trainer")
    for name, measure in (("generation", measure_generation), ("update", measure_update)):
        if name not in wanted:
            continue
        if trainer is None:
            report.data["parts"][name] = {"status": "skipped", "reason": "no trainer (see part trainer)"}
            continue
        report.run_part(name, lambda e, m=measure: m(e, trainer, size, report), MIN_PART_S[name])
    if trainer is not None:
        trainer.rollout.close()
    trainer = holder.pop("trainer", None)
    del trainer
    free_memory()
    if "train" in wanted:
        for env, algo in TRAIN_RUNS:
            report.run_part(f"train/{env}/{algo}",
                            lambda e, env=env, algo=algo: train_step(e, env, algo, model_dir, work / "runs", size),
                            MIN_PART_S["train"])
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    failed = [n for n, p in report.data["parts"].items() if p.get("status") not in ("ok",)]
    report.data["outcome"] = "all parts ok" if not failed else "not ok: " + ", ".join(
        f"{n} ({report.data['parts'][n].get('status')})" for n in failed)
    report.current = "done"
    report.save()
    print(summarise(Path(args.out)), flush=True)
    print(f"saved {args.out}", flush=True)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
