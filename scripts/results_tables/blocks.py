"""The marked blocks of a Markdown file: `<!-- results: NAME -->` ... `<!-- /results -->`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .core import RenderError

OPEN = re.compile(r"^<!-- results: (?P<name>[\w./-]+) -->[ \t]*$")
CLOSE = "<!-- /results -->"


@dataclass(frozen=True)
class Block:
    name: str
    line: int  # 1-based line of the opening marker


def _scan(text: str, path: Path | str) -> list[tuple[Block, int, int]]:
    """Each block with the indexes of its opening and closing marker lines."""
    lines = text.split("\n")
    found: list[tuple[Block, int, int]] = []
    opened: tuple[Block, int] | None = None
    for index, line in enumerate(lines):
        match = OPEN.match(line)
        if match:
            if opened is not None:
                raise RenderError(f"{path}:{index + 1}: a results block opens inside the block opened on line "
                                  f"{opened[0].line} ({opened[0].name}): close it with {CLOSE}")
            opened = (Block(match.group("name"), index + 1), index)
        elif line.strip() == CLOSE:
            if opened is None:
                raise RenderError(f"{path}:{index + 1}: {CLOSE} with no block open")
            found.append((opened[0], opened[1], index))
            opened = None
        elif line.lstrip().startswith("<!-- results") and not match:
            raise RenderError(f"{path}:{index + 1}: malformed results marker {line.strip()!r} (write "
                              "<!-- results: NAME --> on a line of its own)")
    if opened is not None:
        raise RenderError(f"{path}:{opened[0].line}: the block {opened[0].name!r} is never closed ({CLOSE})")
    return found


def blocks(text: str, path: Path | str = "<text>") -> list[Block]:
    return [block for block, _, _ in _scan(text, path)]


def replace_blocks(text: str, rendered: dict[str, str], path: Path | str = "<text>") -> str:
    """`text` with each block's body replaced by `rendered[name]` (which ends with a newline)."""
    lines = text.split("\n")
    out: list[str] = []
    last = 0
    for block, start, end in _scan(text, path):
        out.extend(lines[last:start + 1])
        out.extend(rendered[block.name].rstrip("\n").split("\n"))
        last = end
    out.extend(lines[last:])
    return "\n".join(out)
