"""What every table module uses: the committed JSON read with the file named in every error, the table
registry, and the number formats."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: the registered tables: name -> a function of the results that returns Markdown
TABLES: dict[str, Callable[["Results"], str]] = {}


class RenderError(ValueError):
    """A table cannot be rendered (a missing file, a JSON of an unknown shape, a bad marker): the message
    names the file and, for a shape error, the missing field."""


def table(name: str):
    """Register a table under `name` (the name a Markdown block's marker gives)."""
    def register(render: Callable[["Results"], str]) -> Callable[["Results"], str]:
        if name in TABLES:
            raise RenderError(f"two tables named {name!r}")
        TABLES[name] = render
        return render
    return register


class Source:
    """One JSON file's content, addressed by dotted paths ("evaluations.skillrise.by_carry.skill.6"); a
    missing field raises RenderError naming the file and the field."""

    def __init__(self, rel: str, data: Any) -> None:
        self.rel, self.data = rel, data

    def __call__(self, path: str = "", default: Any = ...) -> Any:
        node = self.data
        walked: list[str] = []
        for part in [p for p in path.split(".") if p]:
            walked.append(part)
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.lstrip("-").isdigit() and -len(node) <= int(part) < len(node):
                node = node[int(part)]
            else:
                if default is not ...:
                    return default
                raise RenderError(f"{self.rel}: no field {'.'.join(walked)!r} (a results table reads "
                                  f"{path!r}; the file's shape is not the one this table knows)")
        return node

    def number(self, path: str) -> float:
        value = self(path)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RenderError(f"{self.rel}: field {path!r} is {type(value).__name__} {value!r}, not a number")
        return float(value)

    def __contains__(self, path: str) -> bool:
        return self(path, None) is not None


class Results:
    """The committed results folder (benchmarks/results/), each JSON read once."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._cache: dict[str, Source] = {}

    def json(self, rel: str) -> Source:
        if rel not in self._cache:
            path = self.folder / rel
            shown = f"benchmarks/results/{rel}"
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                raise RenderError(f"{shown}: no such file (a results table reads it)") from None
            except ValueError as exc:
                raise RenderError(f"{shown}: not JSON ({exc})") from None
            self._cache[rel] = Source(shown, data)
        return self._cache[rel]


# ------------------------------------------------------------------------------------------ formats
def f2(x: float) -> str:
    """Two decimals (a rate)."""
    return f"{x:.2f}"


def interval(ci: Sequence[float]) -> str:
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def ratio(x: float) -> str:
    return f"{x:.2f}x"


def signed(x: float) -> str:
    return f"{x:+.3f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def sources(*files: str, note: str = "") -> str:
    """The line under every table: the files it was rendered from (and how to reproduce)."""
    said = "Rendered from " + ", ".join(f"`benchmarks/results/{f}`" for f in files) + " by `scripts/render_results.py`"
    return f"\n*{said}{'; ' + note if note else ''}.*"
