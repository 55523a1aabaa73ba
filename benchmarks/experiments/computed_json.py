"""The command line of a results file that code computes exactly (no sampling, no training): write it, or
`--check` that the committed file is what the code computes now, so a figure rendered from it cannot drift.
rulebook_ceilings.py and panel_overlap.py are its users."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable


def main(argv: list[str] | None, description: str, compute: Callable[[], Any], out: Path, script: str,
         source: str) -> int:
    """Write `compute()` as JSON to --out (default `out`), or with --check exit 1 when the file differs, naming
    `script` (what rewrites it) and `source` (what it is computed from)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if the JSON is stale")
    parser.add_argument("--out", type=Path, default=out, help="the JSON (default: %(default)s)")
    args = parser.parse_args(argv)
    text = json.dumps(compute(), indent=1) + "\n"
    if args.check:
        if not args.out.is_file() or args.out.read_text(encoding="utf-8") != text:
            print(f"{args.out} differs from {source}: run {script}", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0
