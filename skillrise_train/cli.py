"""`skillrise-train`: train a policy with SkillRise (or the GRPO baseline) on a SkillRise Gym benchmark.

Every `TrainConfig` field is a flag (`--max-new-tokens 64`, booleans as `--lora/--no-lora`); the field's
docstring is its help. Outputs in --output-dir: config.json, metrics.jsonl (one line per step), turns.jsonl
(every model call with its return and advantage), eval.jsonl, and TRL checkpoints (checkpoint-N/).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import sys
import time
import warnings
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, Sequence

from skillrise_train.config import TrainConfig


# ---------------------------------------------------------------------------------------- flags
def _field_docs() -> dict[str, str]:
    """The one-line docstring under each TrainConfig field (read from the source, CleanRL style)."""
    from skillrise_train import config as module

    tree = ast.parse(inspect.getsource(module))
    docs: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "TrainConfig":
            body = node.body
            for item, after in zip(body, body[1:]):
                if isinstance(item, ast.AnnAssign) and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                    docs[item.target.id] = str(after.value.value).strip()
    return docs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="skillrise-train",
        description="Train an LLM policy with SkillRise (solve + curate turns, skill document, decoupled "
        "credit, group-relative advantages, TRL's clipped loss) on a SkillRise Gym benchmark.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    docs = _field_docs()
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not MISSING else None
        help_text = docs.get(f.name, "")
        if isinstance(default, bool):
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=default, help=help_text)
        else:
            kind = type(default) if default is not None else str
            parser.add_argument(flag, dest=f.name, type=kind, default=default, help=help_text)
    return parser


def parse_config(argv: Sequence[str] | None = None) -> TrainConfig:
    args = build_parser().parse_args(argv)
    return TrainConfig(**vars(args))


# ---------------------------------------------------------------------------------------- logging
CONSOLE_COLUMNS = ("step", "success/pos", "adv solve", "adv curate", "loss", "gen tok/s", "tok/s", "step s")


class MetricsLogger:
    """Writes metrics.jsonl and prints one console row per step (a TrainerCallback, built lazily)."""

    def __init__(self, config: TrainConfig, out: Path) -> None:
        from transformers import TrainerCallback

        logger = self

        class _Callback(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                logger.step_started = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                logger.step_seconds = time.perf_counter() - logger.step_started

            def on_log(self, args, state, control, logs=None, **kwargs):
                logger.log(state.global_step, dict(logs or {}))

        self.config, self.out = config, out
        self.callback = _Callback()
        self.step_started = time.perf_counter()
        self.step_seconds = 0.0
        self.evaluate = None  # set by main() once the trainer exists
        self.header_printed = False

    def log(self, step: int, logs: dict[str, Any]) -> None:
        if "loss" not in logs or "train_runtime" in logs:  # TRL's end-of-training summary
            return
        updates = self.config.updates_per_rollout
        rollout = (step - 1) // updates + 1
        tokens = logs.get("tokens/completion", 0.0) + logs.get("tokens/prompt", 0.0)
        gen_s = logs.get("time/generation_s", 0.0) or 0.0
        record = {
            "step": step,
            "rollout": rollout,
            "algo": self.config.algo,
            "step_seconds": round(self.step_seconds, 3),
            "generation_tokens_per_s": logs.get("tokens/completion", 0.0) / gen_s if gen_s else 0.0,
            "tokens_per_s": tokens / self.step_seconds if self.step_seconds else 0.0,
            **{k: v for k, v in logs.items() if isinstance(v, (int, float))},
        }
        with open(self.out / "metrics.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        positions = (
            "/".join(f"{logs[f'success/pos{p}']:.2f}" for p in range(self.config.K))
            if "success/mean" in logs else "(same)"  # later updates of one rollout
        )
        row = (
            f"{step:>4d}", positions, f"{logs.get('advantage/solve_abs', 0.0):.3f}",
            f"{logs.get('advantage/curate_abs', 0.0):.3f}", f"{logs.get('loss', float('nan')):.4f}",
            f"{record['generation_tokens_per_s']:.1f}", f"{record['tokens_per_s']:.0f}", f"{self.step_seconds:.1f}",
        )
        if not self.header_printed:
            print(" | ".join(f"{c:>11s}" for c in CONSOLE_COLUMNS), flush=True)
            self.header_printed = True
        print(" | ".join(f"{c:>11s}" for c in row), flush=True)
        if self.evaluate and self.config.eval_sequences and self.config.eval_interval and (
            step % (self.config.eval_interval * updates) == 0
        ):
            self.evaluate(rollout)


# ---------------------------------------------------------------------------------------- main
def resume_point(out: Path, updates_per_rollout: int) -> str:
    """The newest complete checkpoint in `out` (newer, incomplete ones are named and skipped), with the
    records of later steps dropped so that the resumed run writes each step's records once."""
    from skillrise_train.checkpoints import checkpoint_step, latest_complete, trim_records

    folder, skipped = latest_complete(out)
    for path, reason in skipped:
        print(f"skillrise-train: --resume: skipping {path.name}, not a complete checkpoint: {reason}",
              file=sys.stderr, flush=True)
    if folder is None:
        found = f" ({len(skipped)} incomplete)" if skipped else ""
        raise FileNotFoundError(f"--resume: no complete checkpoint-N folder in {out}{found}; start without --resume")
    step = checkpoint_step(folder)
    dropped = {name: n for name, n in trim_records(out, step, updates_per_rollout).items() if n}
    if dropped:
        print("skillrise-train: --resume: dropped records of steps after " + folder.name + ": "
              + ", ".join(f"{n} from {name}" for name, n in dropped.items()), file=sys.stderr, flush=True)
    return str(folder)


def run(config: TrainConfig) -> dict[str, Any]:
    """Train with `config`; returns a summary (final metrics, evaluation, wall time)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    import transformers
    from transformers import PrinterCallback

    from skillrise_gym.models import resolve_model_path
    from skillrise_train.rollout import default_splits
    from skillrise_train.trainer import SkillRiseTrainer

    started = time.perf_counter()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    if not torch.cuda.is_available():
        torch.set_num_threads(max(1, config.threads))
    out = Path(config.output_dir)
    resume_from = None
    if config.resume:
        resume_from = resume_point(out, config.updates_per_rollout)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2))

    resolve_model_path(config.model)  # fail early, before any env starts, on a bad model name
    backend_options = config.parsed_backend_options()
    eval_split = config.eval_split or default_splits(config.env)[1]
    logger = MetricsLogger(config, out)
    trainer = SkillRiseTrainer.from_config(config, callbacks=[logger.callback])
    rollout = trainer.rollout
    train_split = rollout.split
    trainer.remove_callback(PrinterCallback)
    evaluations: list[dict[str, Any]] = []

    def evaluate(step: int) -> dict[str, Any]:
        from skillrise_train.evaluate import evaluate as run_evaluation

        record = run_evaluation(config, trainer.generate_completions, step, eval_split, out, backend_options)
        print(f"eval step {step} ({eval_split}, {config.eval_sequences} sequences, via {record['runner']}): "
              "success by position " + "/".join(f"{s:.2f}" for s in record["success_by_position"]), flush=True)
        evaluations.append(record)
        return record

    logger.evaluate = evaluate
    print(
        f"skillrise-train: algo={config.algo} env={config.env} ({train_split}) model={config.model} "
        f"K={config.K} G={config.G} S={config.S} steps={config.steps} lora={config.lora} "
        f"device={trainer.accelerator.device} threads={torch.get_num_threads()}"
        + (f" resuming from {resume_from}" if resume_from else ""),
        flush=True,
    )
    try:
        trainer.train(resume_from_checkpoint=resume_from)
        rollouts = trainer.state.global_step // config.updates_per_rollout
        if config.eval_sequences and not (config.eval_interval and rollouts % config.eval_interval == 0):
            evaluate(rollouts)
        trainer.save_model(str(out / "final"))
    finally:
        rollout.close()
    summary = {
        "steps": trainer.state.global_step,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "output_dir": str(out),
        "last_metrics": trainer.last_stats,
        "evaluations": evaluations,
    }
    print(f"done: {summary['steps']} steps in {summary['wall_seconds']} s; outputs in {out}/", flush=True)
    report = run_report(out / "turns.jsonl")
    if report:
        summary["report"] = report
        print(
            f"what the run did: {report['solve_turns']} solve turns, {report['solve_format_valid']:.0%} well-formed "
            f"(<action> tags), {report['tasks']} tasks ended with mean score {report['mean_score']:.2f} and "
            f"success {report['success']:.0%}; {report['curate_turns']} curate turns, "
            f"{report['curate_format_valid']:.0%} well-formed. Every turn: {out / 'turns.jsonl'}; per step: "
            f"{out / 'metrics.jsonl'}. What learning across tasks looks like: benchmarks/transfer_experiment.py "
            "(README, 'Transfer').", flush=True)
    return summary


def run_report(turns_path: Path) -> dict[str, Any] | None:
    """What a run did, from its turns.jsonl: well-formed rates by role, tasks ended, mean score, success."""
    from skillrise_gym.records import read_turns

    if not turns_path.exists():
        return None
    turns = list(read_turns(turns_path))
    solve = [t for t in turns if t.role == "solve"]
    curate = [t for t in turns if t.role == "curate"]
    ended = [t for t in solve if t.task_done]
    rate = lambda items: sum(t.format_valid for t in items) / len(items) if items else 0.0  # noqa: E731
    return {
        "solve_turns": len(solve), "curate_turns": len(curate),
        "solve_format_valid": rate(solve), "curate_format_valid": rate(curate),
        "tasks": len(ended), "mean_score": sum(t.score for t in ended) / len(ended) if ended else 0.0,
        "success": sum(t.success for t in ended) / len(ended) if ended else 0.0,
    }


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_config(argv)
    except ValueError as exc:
        print(f"skillrise-train: error: {exc}", file=sys.stderr)
        return 2
    from skillrise_gym.backends import SkillRiseError
    from skillrise_gym.models import ChatTemplateError, ModelNotFoundError

    try:
        run(config)
    except (ModelNotFoundError, ChatTemplateError, FileNotFoundError, SkillRiseError) as exc:
        print(f"skillrise-train: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"skillrise-train: interrupted; continue with --resume --output-dir {config.output_dir}", file=sys.stderr)
        return 130
    except Exception as exc:
        from skillrise_train.trainer import NonFiniteLossError

        if isinstance(exc, NonFiniteLossError):
            print(f"skillrise-train: error: {exc}", file=sys.stderr)
            return 3
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
