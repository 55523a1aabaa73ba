#!/usr/bin/env python
"""Render every results table in README.md and docs/ from the JSON under benchmarks/results/.

A table lives in a Markdown file between two markers, and nothing between them is typed by hand:

    <!-- results: transfer/r1-tiny -->
    ... generated ...
    <!-- /results -->

The name after `results:` is a table registered in `scripts/results_tables/` (one module per topic; each
table is a function of the committed JSON that returns Markdown, ending with the files it read). This script
rewrites every marked block of README.md and docs/**/*.md; `--check` rewrites nothing and exits 1 naming each
block whose text differs from what the JSON gives (the regeneration test, tests/test_results_render.py, runs
it). A JSON file that lacks a field a table reads is an error naming the file and the field.

    python scripts/render_results.py            # rewrite the blocks
    python scripts/render_results.py --check    # exit 1 if any block is stale
    python scripts/render_results.py --list     # the registered tables and the files they read
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_tables import TABLES, RenderError, Results  # noqa: E402
from results_tables.blocks import Block, blocks, replace_blocks  # noqa: E402

#: the Markdown files whose marked blocks are generated
def documents(root: Path = ROOT) -> list[Path]:
    """README.md and every Markdown file under docs/, in a stable order."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def render_file(path: Path, results: Results) -> tuple[str, str, list[Block]]:
    """(the file's text, its text with every block rendered, the blocks found)."""
    text = path.read_text(encoding="utf-8")
    found = blocks(text, path)
    rendered = {}
    for block in found:
        if block.name not in TABLES:
            raise RenderError(f"{path}:{block.line}: unknown results table {block.name!r} (registered: "
                              f"{', '.join(sorted(TABLES))})")
        if block.name not in rendered:
            rendered[block.name] = TABLES[block.name](results).rstrip("\n") + "\n"
    return text, replace_blocks(text, rendered), found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 naming every stale block")
    parser.add_argument("--list", action="store_true", help="list the registered tables")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    args = parser.parse_args(argv)
    results = Results(args.root / "benchmarks" / "results")
    if args.list:
        for name in sorted(TABLES):
            print(name)
        return 0
    stale, used = [], set()
    try:
        for path in documents(args.root):
            if not path.is_file():
                continue
            text, new, found = render_file(path, results)
            used.update(block.name for block in found)
            if new != text:
                stale.append(path)
                if not args.check:
                    path.write_text(new, encoding="utf-8")
    except RenderError as exc:
        print(f"render_results: {exc}", file=sys.stderr)
        return 2
    unused = sorted(set(TABLES) - used)
    if unused:
        print(f"render_results: registered tables used nowhere: {', '.join(unused)}", file=sys.stderr)
    for path in stale:
        rel = path.relative_to(args.root)
        print(f"render_results: {rel}: " + ("stale (run python scripts/render_results.py)" if args.check
                                            else "rewritten"), file=sys.stderr if args.check else sys.stdout)
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
