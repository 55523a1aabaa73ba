"""Experiment trackers (`skillrise-train --report-to tensorboard wandb trackio`, and `skillrise-bench
--report-to` for its summary): the run's own settings as hyperparameters, and every step's training metrics
and held-out evaluations on one step axis (the bench: its summary's figures, at step 0).

What each tracker gets, the same for all:
- hyperparameters: the run's resolved settings (config.json: env, algo, K, G, S, lr, the episode...),
  flattened to scalars and strings, not TRL's GRPOConfig;
- at each optimizer step: the numbers of metrics.jsonl (success by position, advantages by role, loss,
  tokens, throughput...), under ``train/``;
- at each evaluation: ``eval/success``, ``eval/success/pos<i>`` (and ``eval/pass_at_k/<k>``), at the
  optimizer step that ends the rollout it evaluates.
Offline by default: TensorBoard writes event files in OUTPUT_DIR/tensorboard/; W&B runs with
``WANDB_MODE=offline`` unless the environment sets another mode (then ``wandb sync``); trackio logs to its
local store. A tracker whose package is missing is refused before the model loads (`check_trackers`).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any, Mapping

from skillrise_gym.backends.base import ConfigurationError

TRACKERS = ("tensorboard", "wandb", "trackio")
#: the modules each tracker imports, and the pip requirement that provides them (TensorBoard's writer is
#: torch's, which needs the tensorboard package)
PACKAGES = {"tensorboard": (("tensorboard", "torch"), "tensorboard torch"), "wandb": (("wandb",), "wandb"),
            "trackio": (("trackio",), "trackio")}


def check_trackers(names: list[str]) -> None:
    """Refuse (ConfigurationError, one line naming the package) a tracker whose package is not installed."""
    for name in names:
        if name == "none":
            continue
        modules, requirement = PACKAGES[name]
        absent = [m for m in modules if importlib.util.find_spec(m) is None]
        if absent:
            raise ConfigurationError(f"--report-to {name} needs the {' and '.join(absent)} package"
                                     f"{'s' if len(absent) > 1 else ''}, which {'are' if len(absent) > 1 else 'is'} "
                                     f"not installed: pip install {requirement} (or leave {name} out)")


def flat_settings(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Settings as hyperparameters: nested keys joined by '/', lists and None as strings."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_settings(value, name + "/"))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = json.dumps(value, default=str)
    return out


class Trackers:
    """The trackers of one run (main process only); `log` and `close` are no-ops without any."""

    def __init__(self, names: list[str], out: Path, settings: Mapping[str, Any]) -> None:
        self.names = [n for n in names if n != "none"]
        self.out = out
        self.backends: dict[str, Any] = {}
        hparams = flat_settings(settings)
        run_name = f"{settings.get('algo', 'run')}-{settings.get('env', '')}-{out.name}"
        project = os.environ.get("SKILLRISE_PROJECT", "skillrise")
        for name in self.names:
            if name == "tensorboard":
                from torch.utils.tensorboard import SummaryWriter

                writer = SummaryWriter(log_dir=str(out / "tensorboard"))
                writer.add_text("settings", "```json\n" + json.dumps(dict(settings), indent=1, default=str) + "\n```")
                from torch.utils.tensorboard.summary import hparams as hparam_summaries

                for summary in hparam_summaries({k: v for k, v in hparams.items()}, {"eval/success": 0.0}):
                    writer.file_writer.add_summary(summary)
                self.backends[name] = writer
            elif name == "wandb":
                import wandb

                os.environ.setdefault("WANDB_MODE", "offline")
                self.backends[name] = wandb.init(project=project, name=run_name, dir=str(out), config=hparams,
                                                 reinit=True)
            elif name == "trackio":
                import trackio

                self.backends[name] = trackio.init(project=project, name=run_name, config=hparams)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        numbers = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if not numbers:
            return
        for name, backend in self.backends.items():
            if name == "tensorboard":
                for key, value in numbers.items():
                    backend.add_scalar(key, value, step)
                backend.flush()
            elif name == "wandb":
                backend.log(numbers, step=step)
            elif name == "trackio":
                import trackio

                trackio.log(numbers, step=step)

    def log_training(self, step: int, record: Mapping[str, Any]) -> None:
        self.log(step, {f"train/{k}": v for k, v in record.items() if k not in ("step", "rollout", "algo")})

    def log_evaluation(self, step: int, record: Mapping[str, Any]) -> None:
        metrics = {"eval/success": record.get("success", 0.0)}
        metrics.update({f"eval/success/pos{i}": s for i, s in enumerate(record.get("success_by_position") or [])})
        metrics.update({f"eval/pass_at_k/{k + 1}": s for k, s in enumerate(record.get("pass_at_k") or [])})
        self.log(step, metrics)

    def log_bench_summary(self, summary: Mapping[str, Any]) -> None:
        """A bench summary's figures at step 0: per memory mode and K, success, success by position and the
        cost per task (``<mode>/K<k>/...``)."""
        metrics: dict[str, float] = {}
        modes = summary.get("by_carry") or {str(summary.get("carry", "skill")): summary}
        for mode, member in modes.items():
            for block in member.get("blocks", []):
                if not block.get("sequences"):
                    continue
                prefix = f"{mode}/K{block['K']}"
                metrics[f"{prefix}/success"] = block["success"]["mean"]
                metrics.update({f"{prefix}/success/pos{i}": p["mean"]
                                for i, p in enumerate(block.get("success_by_position") or [])})
                per_task = (block.get("cost") or {}).get("per_task") or {}
                metrics.update({f"{prefix}/cost_per_task/{k}": v for k, v in per_task.items() if v is not None})
        self.log(0, metrics)

    def close(self) -> None:
        for name, backend in self.backends.items():
            if name == "tensorboard":
                backend.close()
            elif name == "wandb":
                backend.finish()
            elif name == "trackio":
                import trackio

                trackio.finish()
        self.backends = {}
