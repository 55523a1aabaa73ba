"""PNG plots of a bench summary: success by task position (one line per K) and success against K; for
several carry modes, the same two side by side (one line per carry mode; one panel per K by position).

Every line carries its 95% CI (the summary's "ci": a Wilson score interval where every sequence's value is 0
or 1, as success at one position; a bootstrap over sequences where they are fractions, as overall success
averaged over several positions; see bench.metrics) as a shaded band (a single point: an error bar);
positions, attempts and K are integer ticks. matplotlib runs on the Agg backend (no display needed); figures
are closed after saving.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from matplotlib.ticker import MaxNLocator  # noqa: E402

BAND_ALPHA = 0.2


def _errors(items: list[Mapping[str, Any]]) -> tuple[list[float], list[list[float]]]:
    means = [i["mean"] for i in items]
    lower = [max(0.0, i["mean"] - i["ci"][0]) for i in items]
    upper = [max(0.0, i["ci"][1] - i["mean"]) for i in items]
    return means, [lower, upper]


def _line_with_band(ax: Any, xs: list[float], items: list[Mapping[str, Any]], label: str, colour: str | None = None,
                    marker: str = "o") -> None:
    """The means as a line with markers and their CI as a shaded band of the line's colour (one point: an
    error bar, a band of one point being invisible)."""
    means, err = _errors(items)
    if len(xs) == 1:
        ax.errorbar(xs, means, yerr=err, marker=marker, color=colour, capsize=3, label=label)
        return
    (line,) = ax.plot(xs, means, marker=marker, color=colour, label=label)
    ax.fill_between(xs, [i["ci"][0] for i in items], [i["ci"][1] for i in items], color=line.get_color(),
                    alpha=BAND_ALPHA, linewidth=0)


def _integer_xticks(ax: Any, ticks: list[int]) -> None:
    """Ticks at the integer x values drawn (positions, attempts, K); with many, an integer locator."""
    ticks = sorted(set(int(t) for t in ticks))
    if 0 < len(ticks) <= 12:
        ax.set_xticks(ticks)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _first(summary: Mapping[str, Any]) -> int:
    """The x of the first point: attempts k count from 1 (Pass@1 ...); task positions from 0, as in the JSON."""
    return 1 if summary["mode"] == "repeat" else 0


def _x_label(summary: Mapping[str, Any]) -> str:
    return "attempt k" if summary["mode"] == "repeat" else "task position (0-based, as in summary.json)"


def plot_success_by_position(summary: Mapping[str, Any], path: str | Path, title: str = "") -> Path:
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    first = _first(summary)
    longest = 0
    for block in summary["blocks"]:
        if not block["sequences"]:
            continue
        key = "pass_at_k" if summary["mode"] == "repeat" else None
        items = list(block[key].values()) if key else block["success_by_position"]
        xs = [x + first for x in range(len(items))]
        _line_with_band(ax, xs, items, label=f"K={block['K']} (n={block['sequences']})")
        longest = max(longest, len(items))
    _integer_xticks(ax, [x + first for x in range(longest)])
    if longest:
        ax.set_xlim(first - 0.5, first + longest - 0.5)
    ax.set_xlabel(_x_label(summary))
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
        _line_with_band(ax, [p["K"] for p in points], points, label="")
    _integer_xticks(ax, [p["K"] for p in points] or [b["K"] for b in summary["blocks"]])
    ax.set_xlabel("K (tasks per sequence)")
    ax.set_ylabel("success rate over all positions")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(title or "success against K (95% CI)")
    return _save(fig, path)


#: one colour and marker per carry mode, the same in every plot
CARRY_STYLE = {"skill": ("tab:blue", "o"), "none": ("tab:gray", "s"), "reflect": ("tab:orange", "^")}


def _carry_style(mode: str, n: int) -> tuple[str, str]:
    return CARRY_STYLE.get(mode, (f"C{n % 10}", "D"))


def _position_items(summary: Mapping[str, Any], block: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(block["pass_at_k"].values()) if summary["mode"] == "repeat" else block["success_by_position"]


def plot_carry_success_by_position(summary: Mapping[str, Any], path: str | Path, title: str = "") -> Path:
    """One panel per K with finished sequences (sharing y); in each, one line per carry mode (95% CI bands)."""
    by_carry = summary["by_carry"]
    Ks = [K for K in summary["K"]
          if any(b["K"] == K and b["sequences"] for m in by_carry.values() for b in m["blocks"])] or summary["K"][:1]
    fig, axes = plt.subplots(1, len(Ks), figsize=(1.5 + 3.2 * len(Ks), 4), dpi=100, sharey=True, squeeze=False)
    modes = list(by_carry)
    first = _first(summary)
    for ax, K in zip(axes[0], Ks):
        for n, mode in enumerate(modes):
            block = next((b for b in by_carry[mode]["blocks"] if b["K"] == K), None)
            if not block or not block["sequences"]:
                continue
            items = _position_items(summary, block)
            offset = (n - (len(modes) - 1) / 2) * 0.08  # modes side by side, not on top of each other
            colour, marker = _carry_style(mode, n)
            _line_with_band(ax, [x + first + offset for x in range(len(items))], items,
                            label=f"{mode} (n={block['sequences']})", colour=colour, marker=marker)
        ax.set_title(f"K={K}")
        _integer_xticks(ax, [x + first for x in range(K)])
        ax.set_xlim(first - 0.5, first + K - 0.5)
        ax.set_xlabel(_x_label(summary))
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    axes[0][0].set_ylabel("Pass@k" if summary["mode"] == "repeat" else "success rate")
    fig.suptitle(title or "success by task position per carry mode (95% CI)", fontsize="medium")
    return _save(fig, path)


def plot_carry_success_vs_K(summary: Mapping[str, Any], path: str | Path, title: str = "") -> Path:
    """Success over all positions against K, one line per carry mode (95% CI bands)."""
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    modes = list(summary["by_carry"])
    for n, mode in enumerate(modes):
        points = summary["by_carry"][mode]["success_vs_K"]
        if not points:
            continue
        offset = (n - (len(modes) - 1) / 2) * 0.06
        colour, marker = _carry_style(mode, n)
        _line_with_band(ax, [p["K"] + offset for p in points], points, label=mode, colour=colour, marker=marker)
    _integer_xticks(ax, list(summary["K"]))
    ax.set_xlabel("K (tasks per sequence)")
    ax.set_ylabel("success rate over all positions")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(title or "success against K per carry mode (95% CI)", fontsize="medium")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(title="carry")
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
