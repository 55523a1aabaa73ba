"""What a finished run leaves for a reader: its learning curves (`skillrise-train plot RUN`, also drawn at the
end of every run) and model cards (RUN/README.md and RUN/final/README.md) that say what was trained, on what,
how, and what it measured, in place of TRL's and PEFT's templates.

learning_curves.png, four panels on the optimizer-step axis: training success by task position, held-out
success by position (eval.jsonl), advantages by role (mean |A| of solve and curate turns), and the loss with
the throughput (tokens/s) on a second axis. Positions are numbered from 0, as in the JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: embedded model names and the Hub ids they are copies of (for a card's base_model)
HUB_IDS = {"smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct"}


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def plot_run(run: str | Path) -> Path:
    """Draw RUN/learning_curves.png from RUN/metrics.jsonl and RUN/eval.jsonl; returns its path. A folder
    without metrics.jsonl is a FileNotFoundError naming it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run = Path(run)
    metrics = [r for r in _records(run / "metrics.jsonl") if "loss" in r]
    if not metrics:
        raise FileNotFoundError(f"{run}: no metrics.jsonl with a step in it (not a skillrise-train run, or one that "
                                "never finished a step)")
    config = json.loads((run / "config.json").read_text()) if (run / "config.json").is_file() else {}
    updates = int(config.get("updates_per_rollout") or 1)
    evaluations = _records(run / "eval.jsonl")
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), dpi=100)
    steps = [r["step"] for r in metrics]
    ax = axes[0][0]
    positions = sorted({int(k[len("success/pos"):]) for r in metrics for k in r if k.startswith("success/pos")})
    for p in positions:
        ax.plot(*zip(*[(r["step"], r[f"success/pos{p}"]) for r in metrics if f"success/pos{p}" in r]), label=f"position {p}")
    ax.set_title("training success by position")
    ax = axes[0][1]
    if evaluations:
        held = max(len(e.get("success_by_position") or []) for e in evaluations)
        for p in range(held):
            points = [(e["step"] * updates, e["success_by_position"][p]) for e in evaluations
                      if len(e.get("success_by_position") or []) > p]
            ax.plot(*zip(*points), marker="o", label=f"position {p}")
        ax.set_title(f"held-out success by position ({evaluations[-1].get('split', 'held out')})")
    else:
        ax.text(0.5, 0.5, "no held-out evaluation (--eval-sequences 0)", ha="center", va="center")
        ax.set_title("held-out success by position")
    ax = axes[1][0]
    for role in ("solve", "curate"):
        key = f"advantage/{role}_abs"
        if any(key in r for r in metrics):
            ax.plot(steps, [r.get(key, float("nan")) for r in metrics], label=f"{role} turns")
    ax.set_title("mean |advantage| by role")
    ax = axes[1][1]
    ax.plot(steps, [r["loss"] for r in metrics], color="C0", label="loss")
    ax.set_ylabel("loss")
    twin = ax.twinx()
    twin.plot(steps, [r.get("tokens_per_s", float("nan")) for r in metrics], color="C1", label="tokens/s")
    twin.set_ylabel("tokens/s")
    ax.set_title("loss and throughput")
    from matplotlib.ticker import MaxNLocator

    for row in axes:
        for a in row:
            a.set_xlabel("optimizer step")
            a.xaxis.set_major_locator(MaxNLocator(integer=True))
            a.grid(alpha=0.3)
            if a.get_legend_handles_labels()[0]:
                a.legend(fontsize=8)
    for a in (axes[0][0], axes[0][1]):
        a.set_ylim(-0.02, 1.02)
    title = " ".join(f"{k}={config[k]}" for k in ("algo", "env", "K", "G", "S", "model") if k in config)
    fig.suptitle(title or str(run))
    fig.tight_layout()
    path = run / "learning_curves.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def model_card(run: Path, config: dict[str, Any], final: bool) -> str:
    """A model card for RUN/final (`final`) or the run folder: what was trained, on what, how, and what the
    last held-out evaluation measured, with the commands that reproduce and evaluate it."""
    model = str(config.get("model", ""))
    base = HUB_IDS.get(model.lower())
    episode = config.get("episode") or {}
    evaluations = _records(run / "eval.jsonl")
    last = evaluations[-1] if evaluations else None
    tags = ["skillrise", "reinforcement-learning", "trl", str(config.get("algo", "")), str(config.get("env", ""))]
    front = ["---", *([f"base_model: {base}"] if base else []),
             f"library_name: {'peft' if config.get('lora') else 'transformers'}",
             "tags:", *[f"- {t}" for t in dict.fromkeys(tags) if t], "---", ""]
    settings = (f"algorithm `{config.get('algo')}` (curate credit `{config.get('curate_credit')}`), env "
                f"`{config.get('env')}` split `{config.get('train_split')}`, K={config.get('K')} tasks per sequence, "
                f"G={config.get('G')} trials per sequence, S={config.get('S')} sequences per step, "
                f"{config.get('steps')} steps, lr {config.get('lr')}, "
                + ("LoRA r={} alpha={}".format(config.get("lora_r"), config.get("lora_alpha")) if config.get("lora")
                   else "every weight trained"))
    lines = [*front, f"# {'The policy' if final else 'A run'} trained by skillrise-train", "",
             f"Started from `{model}`" + (f" (a copy of [{base}](https://huggingface.co/{base}))" if base else "")
             + f"; {settings}.", "",
             f"The episode it was trained on (`{'episode.json' if final else 'final/episode.json'}`): "
             f"{episode.get('prompt_style')} prompts, carry `{episode.get('carry')}`, at most "
             f"{episode.get('max_task_steps')} step(s) per task, engine options {json.dumps(episode.get('backend_options') or {})}.", ""]
    if last:
        positions = " / ".join(f"{s:.2f}" for s in last.get("success_by_position") or [])
        lines += [f"Held-out evaluation at step {last.get('step')} (split `{last.get('split')}`, "
                  f"{last.get('sequences')} sequences, greedy): success {last.get('success', 0.0):.2f}, by position "
                  f"{positions} (from `eval.jsonl`). A small evaluation: see its confidence interval in "
                  f"`{'../' if final else ''}eval/step-{last.get('step')}/summary.json`.", ""]
    folder = "." if final else "final"
    lines += ["Evaluate it on the episode it was trained on (the bench reads `episode.json`):", "", "```bash",
              f"skillrise-bench --env {config.get('env')} --agent hf --model {folder} --split "
              f"{config.get('eval_split')} --K 1 2 4 6 --out runs/eval", "```", "",
              "Train it again (the run's own settings; `config.json` is a config file):", "", "```bash",
              f"skillrise-train --config {'../' if final else ''}config.json --output-dir runs/again", "```", "",
              "Made with SkillRise Gym; its docs/train.md says what each setting does.", ""]
    return "\n".join(lines)


def write_model_cards(run: Path) -> list[Path]:
    """RUN/README.md and RUN/final/README.md (when final/ exists) from the run's config.json and eval.jsonl."""
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    written = []
    for final, folder in ((False, run), (True, run / "final")):
        if folder.is_dir():
            (folder / "README.md").write_text(model_card(run, config, final), encoding="utf-8")
            written.append(folder / "README.md")
    return written


def main(argv: list[str]) -> int:
    """`skillrise-train plot RUN [RUN ...]`: draw each run's learning_curves.png."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="skillrise-train plot", description="Draw a run's learning curves "
                                     "(RUN/learning_curves.png): training and held-out success by position, "
                                     "advantages by role, loss and throughput.")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="skillrise-train --output-dir folders")
    args = parser.parse_args(argv)
    code = 0
    for run in args.runs:
        try:
            print(plot_run(run))
        except (FileNotFoundError, ValueError, OSError) as exc:
            print(f"skillrise-train plot: error: {exc}", file=sys.stderr)
            code = 2
        except ImportError:
            print("skillrise-train plot: error: drawing needs matplotlib: pip install 'skillrise-gym[bench]'",
                  file=sys.stderr)
            return 2
    return code
