"""`skillrise-bench compare RUN [RUN ...]`: several bench runs in one table, paired where they share a panel.

Each RUN is a bench run folder; a folder of several memory modes gives one row per mode (RUN:MODE picks one).
Per K the runs share: success [95% CI], success by position, WebShop's score beside its success (never mixed),
the paired difference in success from the first row on the same sequences (bootstrap 95% CI over
sequences), and cost per task (prompt + completion tokens, model calls, dollars when the run was given
--price) with the curate turns' share of tokens. Written as Markdown (stdout), and with --out DIR also
compare.csv, compare.tex, compare.json and compare.png (success by position at the largest K).

Refused: runs of different envs (nothing to compare). Rows are paired on the draws both finished (a run
cut short pairs on what it finished); a row whose sequences at some K differ from the first row's at a shared
draw, or share none (another panel: `skillrise_gym.panels`), is not paired at that K: its difference reads
"other panel", and the table says so under it; rows whose data fingerprint or engine versions differ are
flagged the same way.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from skillrise_gym.bench import metrics
from skillrise_gym.panels import records_hash


@dataclass
class Row:
    name: str
    folder: Path
    identity: dict[str, Any]
    summary: dict[str, Any]
    results: list[dict[str, Any]]

    def at(self, K: int) -> list[dict[str, Any]]:
        return [r for r in self.results if r["K"] == K]

    def block(self, K: int) -> dict[str, Any] | None:
        return next((b for b in self.summary.get("blocks", []) if b.get("K") == K and b.get("sequences")), None)

    def panel(self, K: int) -> str:
        i = self.identity
        return records_hash(i.get("env", ""), i.get("split", ""), i.get("backend_options") or {}, self.at(K))


def load_rows(arguments: Sequence[str]) -> list[Row]:
    rows: list[Row] = []
    for argument in arguments:
        path, _, mode = argument.partition(":") if ":" in argument and not Path(argument).exists() else (argument, "", "")
        folder = Path(path).expanduser()
        if not folder.is_dir():
            raise ValueError(f"{argument}: not a bench run folder")
        if (folder / "carry.json").is_file():
            summary = json.loads((folder / "summary.json").read_text()) if (folder / "summary.json").is_file() else {}
            modes = [mode] if mode else summary.get("carry") or sorted(
                p.name.removeprefix("carry-") for p in folder.glob("carry-*") if p.is_dir())
            for m in modes:
                if not (folder / f"carry-{m}").is_dir():
                    raise ValueError(f"{argument}: no memory mode {m!r} there")
                rows.append(_row(f"{folder.name}:{m}", folder / f"carry-{m}"))
        elif mode:
            raise ValueError(f"{argument}: {folder} holds one mode; drop ':{mode}'")
        else:
            rows.append(_row(folder.name, folder))
    if len(rows) < 2:
        raise ValueError("compare needs at least two runs (or a run of several memory modes)")
    envs = {row.identity.get("env") for row in rows}
    if len(envs) > 1:
        raise ValueError(f"the runs are of different envs ({', '.join(sorted(map(str, envs)))}): nothing to compare")
    return rows


def _row(name: str, folder: Path) -> Row:
    from skillrise_gym.records import iter_jsonl

    manifest, summary = folder / "manifest.json", folder / "summary.json"
    if not manifest.is_file() or not summary.is_file():
        raise ValueError(f"{folder}: no manifest.json and summary.json (not a bench run, or one that never finished "
                         "a sequence)")
    return Row(name, folder, json.loads(manifest.read_text()).get("identity", {}), json.loads(summary.read_text()),
               list(iter_jsonl(folder / "results.jsonl")) if (folder / "results.jsonl").is_file() else [])


def compare(rows: list[Row], seed: int = 0) -> dict[str, Any]:
    """The comparison as data (what every format renders)."""
    first = rows[0]
    Ks = sorted({K for row in rows for K in (b["K"] for b in row.summary.get("blocks", []) if b.get("sequences"))})
    notes: list[str] = []
    fingerprints = {row.name: (row.identity.get("data"), (row.summary.get("fingerprint") or {}).get("engine"))
                    for row in rows}
    for row in rows[1:]:
        known = all(value is not None for value in (*fingerprints[row.name], *fingerprints[first.name]))
        if known and fingerprints[row.name] != fingerprints[first.name]:
            notes.append(f"{row.name}: its data or engine versions differ from {first.name}'s "
                         f"({fingerprints[row.name]} vs {fingerprints[first.name]})")
    table: dict[str, Any] = {"env": first.identity.get("env"), "reference": first.name, "K": Ks, "rows": [],
                             "notes": notes}
    webshop = first.identity.get("env") == "webshop"
    for row in rows:
        entry: dict[str, Any] = {"name": row.name, "folder": str(row.folder), "by_K": {}}
        for K in Ks:
            block = row.block(K)
            if block is None:
                continue
            cell: dict[str, Any] = {
                "sequences": block["sequences"], "success": block["success"],
                "success_by_position": [p["mean"] for p in block["success_by_position"]],
                "panel": row.panel(K)}
            if webshop:
                cell["score"] = block["score"]
            cost = block.get("cost") or metrics.cost(row.at(K))
            total, tasks = cost["total"], max(1, cost["tasks"])
            tokens = ((total["prompt_tokens"] or 0) + (total["completion_tokens"] or 0)) if total["prompt_tokens"] is not None else None
            curate = cost["curate"]
            curate_tokens = ((curate["prompt_tokens"] or 0) + (curate["completion_tokens"] or 0)) if curate["prompt_tokens"] is not None else None
            cell["cost_per_task"] = {"tokens": None if tokens is None else tokens / tasks,
                                     "model_calls": None if total["model_calls"] is None else total["model_calls"] / tasks,
                                     "dollars": total["dollars"] / tasks if "dollars" in total else None,
                                     "curate_share_of_tokens": (curate_tokens / tokens) if tokens and curate_tokens is not None else None}
            if row is not first and first.block(K) is None:
                cell["difference"] = "no reference"
            elif row is not first:
                if not same_sequences(row.at(K), first.at(K)):
                    cell["difference"] = None
                    table["notes"].append(f"{row.name}, K={K}: played another panel than {first.name} (panel hash "
                                          f"{cell['panel']} vs {first.panel(K)}): not paired")
                else:  # the same draws where both finished one (a run cut short pairs on what it finished)
                    cell["difference"] = metrics.paired_difference(row.at(K), first.at(K), seed)
            entry["by_K"][str(K)] = cell
        table["rows"].append(entry)
    return table


def same_sequences(mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> bool:
    """Whether two runs' results of one K drew the same sequences where both finished a draw index (the same
    sequence id and task ids at every shared index), with at least one shared."""
    ours = {r["index"]: (r.get("sequence_id"), tuple(r.get("task_ids") or ())) for r in mine}
    other = {r["index"]: (r.get("sequence_id"), tuple(r.get("task_ids") or ())) for r in theirs}
    shared = set(ours) & set(other)
    return bool(shared) and all(ours[i] == other[i] for i in shared)


def _ci(stat: dict[str, Any] | None, signed: bool = False) -> str:
    if not stat or "mean" not in stat:
        return "-"
    f = "{:+.2f}" if signed else "{:.2f}"
    return f"{f.format(stat['mean'])} [{f.format(stat['ci'][0])}, {f.format(stat['ci'][1])}]"


def _number(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def lines(table: dict[str, Any]) -> list[list[str]]:
    """The table's rows as cells (the header first), one row per (run, K)."""
    webshop = table["env"] == "webshop"
    header = ["run", "K", "seqs", "success [95% CI]"] + (["score"] if webshop else []) + [
        f"vs {table['reference']} [95% CI]", "by position", "tokens/task", "calls/task", "$/task", "curate share"]
    out = [header]
    for entry in table["rows"]:
        for K, cell in entry["by_K"].items():
            paired = cell.get("difference")
            difference = ("reference" if entry["name"] == table["reference"] else "other panel" if paired is None
                          else "-" if paired == "no reference" else _ci(paired, signed=True))
            cost = cell["cost_per_task"]
            out.append([entry["name"], K, str(cell["sequences"]), _ci(cell["success"])]
                       + ([f"{cell['score']['mean']:.3f}"] if webshop else [])
                       + [difference, " / ".join(f"{p:.2f}" for p in cell["success_by_position"]),
                          _number(cost["tokens"]), _number(cost["model_calls"], 2),
                          "-" if cost["dollars"] is None else f"{cost['dollars']:.5f}",
                          "-" if cost["curate_share_of_tokens"] is None else f"{cost['curate_share_of_tokens']:.0%}"])
    return out


def markdown(table: dict[str, Any]) -> str:
    cells = lines(table)
    text = [f"### {table['env']}: {len(table['rows'])} runs, paired against {table['reference']}", "",
            "| " + " | ".join(cells[0]) + " |", "|" + "---|" * len(cells[0])]
    text += ["| " + " | ".join(row) + " |" for row in cells[1:]]
    if table["env"] == "webshop":
        text += ["", "WebShop: success is the share of tasks with reward 1; score is the mean reward (0-1), reported "
                     "separately."]
    text += [""] + [f"- note: {note}" for note in table["notes"]]
    return "\n".join(text).rstrip() + "\n"


def csv_text(table: dict[str, Any]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(lines(table))
    return buffer.getvalue()


def latex(table: dict[str, Any]) -> str:
    cells = lines(table)

    def escape(text: str) -> str:
        for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"),
                     ("_", r"\_"), ("{", r"\{"), ("}", r"\}")):
            text = text.replace(a, b)
        return text

    body = [" & ".join(escape(c) for c in row) + r" \\" for row in cells]
    return "\n".join([r"\begin{tabular}{" + "l" * len(cells[0]) + "}", r"\toprule", body[0], r"\midrule",
                      *body[1:], r"\bottomrule", r"\end{tabular}"]) + "\n"


def plot(table: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    K = str(max(table["K"]))
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for entry in table["rows"]:
        cell = entry["by_K"].get(K)
        if cell:
            ax.plot(range(len(cell["success_by_position"])), cell["success_by_position"], marker="o",
                    label=entry["name"])
    ax.set_xlabel("task position (0-based, as in the JSON)")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{table['env']}: success by position at K={K}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="skillrise-bench compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN", help="bench run folders (RUN:MODE: one memory mode of one)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="also write compare.md, .csv, .tex, .json and .png there")
    parser.add_argument("--seed", type=int, default=0, help="seeds the bootstrap of the paired differences")
    args = parser.parse_args(list(argv))
    try:
        table = compare(load_rows(args.runs), args.seed)
    except (ValueError, OSError) as exc:
        print(f"skillrise-bench compare: error: {exc}", file=sys.stderr)
        return 2
    text = markdown(table)
    print(text, end="")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.md").write_text(text)
        (out / "compare.csv").write_text(csv_text(table))
        (out / "compare.tex").write_text(latex(table))
        (out / "compare.json").write_text(json.dumps(table, indent=1) + "\n")
        plot(table, out / "compare.png")
        print(f"written: {out}/compare.md, .csv, .tex, .json, .png", file=sys.stderr)
    return 0
