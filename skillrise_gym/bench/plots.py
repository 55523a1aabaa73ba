"""PNG plots of a bench summary: success by task position (one line per K) and success against K.

matplotlib runs on the Agg backend (no display needed); figures are closed after saving.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)


def _errors(items: list[Mapping[str, Any]]) -> tuple[list[float], list[list[float]]]:
    means = [i["mean"] for i in items]
    lower = [max(0.0, i["mean"] - i["ci"][0]) for i in items]
    upper = [max(0.0, i["ci"][1] - i["mean"]) for i in items]
    return means, [lower, upper]


def plot_success_by_position(summary: Mapping[str, Any], path: str | Path, title: str = "") -> Path:
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for block in summary["blocks"]:
        if not block["sequences"]:
            continue
        key = "pass_at_k" if summary["mode"] == "repeat" else None
        items = list(block[key].values()) if key else block["success_by_position"]
        means, err = _errors(items)
        xs = list(range(1, len(means) + 1))
        ax.errorbar(xs, means, yerr=err, marker="o", capsize=3, label=f"K={block['K']} (n={block['sequences']})")
    ax.set_xlabel("attempt k" if summary["mode"] == "repeat" else "task position")
    ax.set_ylabel("Pass@k" if summary["mode"] == "repeat" else "success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(title or "success by task position (95% CI)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    return _save(fig, path)


def plot_success_vs_K(summary: Mapping[str, Any], path: str | Path, title: str = "") -> Path:
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    points = summary["success_vs_K"]
    if points:
        means, err = _errors(points)
        ax.errorbar([p["K"] for p in points], means, yerr=err, marker="o", capsize=3)
        ax.set_xticks([p["K"] for p in points])
    ax.set_xlabel("K (tasks per sequence)")
    ax.set_ylabel("success rate over all positions")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(title or "success against K (95% CI)")
    return _save(fig, path)


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    try:
        fig.tight_layout()
        fig.savefig(tmp, format="png")
    finally:
        plt.close(fig)
    tmp.replace(path)
    return path
