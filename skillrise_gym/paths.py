"""Where the project keeps its caches. Data folders are only ever read, never written."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """`$SKILLRISE_CACHE` (default `~/.cache/skillrise`) joined with `parts`, created on demand."""
    root = Path(os.environ.get("SKILLRISE_CACHE") or Path.home() / ".cache" / "skillrise").expanduser()
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
