#!/usr/bin/env python
"""Every decimal figure typed in the docs' prose is found in a file its section cites.

The tables are generated (scripts/render_results.py); the prose around them is written by hand, and a figure
typed there can drift from its JSON or have none. This check reads the documentation (docs/**/*.md) and the
results folders' READMEs (benchmarks/results/**/README.md) section by section (a section runs from a heading,
a paragraph opening with a bold title, or, in a results README, a paragraph opening with the folder it
describes, to the next) and asks of every decimal figure in the prose (0.61, +0.035, 1.78x, 24%, 26.7k) that
it be found in a file the same section names (in prose or in a generated table's footer, not in code); an
integer is checked only with a unit (3x, 24%, 107k, 30s, 250 MB: a count, a step number or K is not):

- a JSON under benchmarks/results/ (a local runs/ folder is not committed data), named by its path from the
  repository, from benchmarks/results/ or from the page's folder; only when no such path exists, by the tail
  of its path, as the prose does: `curriculum/k6/` names every JSON under a folder whose path ends so;
  `novel_{kinds,colours}/` names both. The figure is found when some number in it rounds to the figure at the
  figure's precision (signs ignored: the prose says "0.175 below");
- a source or test file (`tests/test_keeping_credit.py`): the figure is found when it appears in the file's
  text (a threshold the test asserts).

It is a floor, not a proof: a figure whose digits happen to match another number in a cited file passes, so a
section that cites many files checks little; keep citations next to the figures they back. A percentage is found
as a share (0.52) or as a percentage the JSON stores as a decimal, never as a count. Generated blocks, code
(fenced, indented and inline), links, version numbers (three parts, or after a package's name) and confidence
levels ("a 95% CI") are not prose figures; a setting or a definition typed in prose is written as code
(`gamma 0.6`, reward `1.0`). A figure that is derived (a difference of two means, a ratio of two timings) is
not found: commit it in the JSON that the experiment writes, or say it without the number.

    python scripts/check_figures.py            # exit 1 listing every figure not found, with page, line, section
    python scripts/check_figures.py PAGE ...   # only these pages

tests/test_results_render.py runs it over the committed pages.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = "benchmarks/results"

#: the pages checked: the documentation and the results folders' READMEs (README.md has a stricter test: its
#: prose types no measured figure at all)
PAGE_GLOBS = ("docs/**/*.md", f"{RESULTS}/**/README.md")

_GENERATED = re.compile(r"<!-- results: .*? -->.*?<!-- /results -->", re.S)
_FENCE = re.compile(r"^\s*(```|~~~).*?^\s*\1", re.S | re.M)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_INLINE_CODE = re.compile(r"`([^`]+)`")
_LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} ")
#: a file the prose names: a path ending in .json or .py, or a folder (ending in /)
_REF = re.compile(r"(?<![\w/.-])((?:[\w.*{},-]+/)+(?:[\w.*{},-]+\.(?:json|py))?|[\w.*{},-]+\.(?:json|py))(?![\w])")
#: a figure, with its sign and an optional unit joined to it (ratio x, percent, k, seconds, sizes) or, for a
#: size, after a space (250 MB); every unit here makes an integer a measurement ("3x", "24%", "107k", "30s")
_FIGURE = re.compile(r"(?<![\w.])([+\-−]?)(\d+\.\d+|\.\d+|\d+)(x|%|k|pp|ms|s|min|h|GB|MB|GiB|MiB| GB| MB| GiB| MiB)?(?![\w]|\.\d)")
#: a package and its version ("alfworld 0.4.2", "Python 3.10"): not a measurement
_VERSION_AFTER = re.compile(r"(?i)\b(python|torch|transformers|trl|peft|accelerate|gymnasium|numpy|ray|vllm|java|jdk|"
                            r"pytest|arxiv)\s*[=<>~]*\s*(\d+(\.\d+)*(,\s*|\s+(to|and|or)\s+))*$")
#: a confidence level, not a measurement ("a 95% CI")
_LEVEL = re.compile(r"\s*(CI|confidence|bootstrap|interval)", re.I)
_LEVELS = ("90", "95", "99")


@dataclass(frozen=True)
class Missing:
    page: str
    line: int
    section: str
    figure: str
    cited: tuple[str, ...]

    def __str__(self) -> str:
        where = ", ".join(self.cited) if self.cited else "no file cited in this section"
        return f"{self.page}:{self.line} [{self.section}] {self.figure} not found in: {where}"


def pages(root: Path = ROOT) -> list[Path]:
    found: set[Path] = set()
    for pattern in PAGE_GLOBS:
        found.update(p for p in root.glob(pattern) if "/inits/" not in p.as_posix())
    return sorted(found)


def _expand(ref: str) -> list[str]:
    """`novel_{kinds,colours}/` -> both."""
    match = re.search(r"\{([^{}]*)\}", ref)
    if not match:
        return [ref]
    head, tail = ref[: match.start()], ref[match.end():]
    return [x for option in match.group(1).split(",") for x in _expand(head + option + tail)]


@lru_cache(maxsize=None)
def _json_files(root: Path) -> tuple[str, ...]:
    base = root / RESULTS
    return tuple(sorted(p.relative_to(root).as_posix() for p in base.rglob("*.json") if "/inits/" not in p.as_posix()))


def _exact(one: str, page: Path, root: Path) -> list[Path]:
    """The files `one` names as a path from the repository, from benchmarks/results or from the page's folder."""
    out: list[Path] = []
    results = (root / RESULTS).resolve()
    for base in (root, root / RESULTS, page.parent):
        target = (base / one).resolve()
        if not target.is_relative_to(results if not one.endswith(".py") else root.resolve()):
            continue  # data is what benchmarks/results holds (a local runs/ folder is not committed)
        if one.endswith("/") and target.is_dir():
            if target == results:
                continue  # the whole results tree is no citation
            out.extend(p for p in (root / rel for rel in _json_files(root)) if p.resolve().is_relative_to(target))
        elif "*" in one:
            out.extend(sorted(target.parent.glob(target.name)) if target.parent.is_dir() else [])
        elif target.is_file():
            out.append(target)
        if out:
            return out
    return out


def resolve(ref: str, page: Path, root: Path = ROOT) -> list[Path]:
    """The files a reference in `page` names: a JSON under benchmarks/results (or the JSONs under a folder), or a
    source file. A path from the repository, from benchmarks/results or from the page's folder wins; only when
    none exists is the reference read as the tail of a path (`curriculum/k6/`, `paired_own.json`), where it
    names every file whose path ends so."""
    out: list[Path] = []
    for one in _expand(ref.strip()):
        if one.startswith("./"):
            one = one[2:]
        exact = _exact(one, page, root)
        if exact or one.endswith(".py"):
            out.extend(exact)
            continue
        tail = one.lstrip("./")
        pattern = tail if tail.endswith(("/", ".json")) else tail + "/"
        if pattern.strip("/") in ("", "benchmarks", RESULTS):
            continue
        for rel in _json_files(root):
            if pattern.endswith("/"):
                hit = ("/" + pattern) in ("/" + rel)
            else:
                hit = re.fullmatch(".*/" + re.escape(pattern).replace(r"\*", "[^/]*"), "/" + rel) is not None
            if hit:
                out.append(root / rel)
    return [p.resolve() for p in out]


def _numbers(obj, out: list[tuple[float, bool]]) -> None:
    """Every number in a JSON value, with whether it is an integer (a count); numbers inside strings too."""
    if isinstance(obj, bool) or obj is None:
        return
    if isinstance(obj, (int, float)):
        out.append((float(obj), isinstance(obj, int)))
    elif isinstance(obj, str):
        out.extend((float(m), False) for m in re.findall(r"-?\d+\.\d+", obj))
    elif isinstance(obj, dict):
        for value in obj.values():
            _numbers(value, out)
    elif isinstance(obj, list):
        for value in obj:
            _numbers(value, out)


@lru_cache(maxsize=None)
def _source_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@lru_cache(maxsize=None)
def _file_numbers(path: Path) -> tuple[tuple[float, bool], ...]:
    out: list[tuple[float, bool]] = []
    _numbers(json.loads(path.read_text(encoding="utf-8")), out)
    return tuple(out)


def _found(figure: str, unit: str, files: list[Path]) -> bool:
    decimals = len(figure.split(".")[1]) if "." in figure else 0
    value = float(figure)
    tolerance = 0.5 * 10 ** -decimals + 1e-9
    for path in files:
        if path.suffix == ".py":
            if re.search(r"(?<![\d.])" + re.escape(figure) + r"(?![\d])", _source_text(path)):
                return True
            continue
        for x, integer in _file_numbers(path):
            if unit == "%":  # a share, or a percentage the JSON stores as such (never a count)
                candidates = (abs(x) * 100,) if integer else (abs(x) * 100, abs(x))
            elif unit == "k":
                candidates = (abs(x) / 1000, abs(x))
            else:
                candidates = (abs(x),)
            if any(abs(c - value) <= tolerance for c in candidates):
                return True
    return False


def _blank(match: re.Match) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def _blank_indented_code(text: str) -> str:
    """Blank Markdown's indented code blocks: lines indented by 4 or more after a blank line, where the paragraph
    before the blank line is not a list item (inside a list, indentation continues the item)."""
    lines = text.split("\n")
    in_list = in_code = False
    for i, line in enumerate(lines):
        blank_before = i == 0 or not lines[i - 1].strip()
        if not line.strip():
            continue
        if line.startswith("    ") and (in_code or (blank_before and not in_list)):
            in_code = True
            lines[i] = " " * len(line)
            continue
        in_code = False
        if not line.startswith(" "):
            in_list = bool(re.match(r"([-*+]|\d+\.)\s", line)) or (in_list and not blank_before)
    return "\n".join(lines)


def _sections(text: str, folders: bool) -> list[tuple[int, str, list[str], list[str]]]:
    """(first line number, title, prose lines, citing lines) per section, line numbers kept. In the prose lines
    generated blocks, code and comments are blanked; the citing lines keep the generated blocks (a generated
    table's footer names the files it was rendered from, which the prose after it may quote) but not code or
    comments. A section starts at a heading, at a paragraph that opens with a bold title (`**Why ...**`), and, in
    a results README (`folders`), at a paragraph that opens with the folder it describes (`lr1e-4/:`)."""
    text = _FENCE.sub(_blank, text)  # a generated block holds no fence; every blanking keeps the line count
    citing = _blank_indented_code(_COMMENT.sub(_blank, text)).split("\n")
    prose = _blank_indented_code(_COMMENT.sub(_blank, _GENERATED.sub(_blank, text))).split("\n")
    sections: list[tuple[int, str, list[str], list[str]]] = []
    previous = ""
    for number, (line, cites) in enumerate(zip(prose, citing), 1):
        opens_paragraph = not previous.strip()
        title = None
        if _HEADING.match(line):
            title = line.lstrip("#").strip()
        elif opens_paragraph and line.startswith("**"):
            title = line[2:].split("**")[0]
        elif opens_paragraph and folders and re.match(r"[\w.-]+/(\w[\w.-]*/)*[\s:(]", line):
            title = line.split()[0]
        if title is not None or not sections:
            sections.append((number, (title or "")[:60], [], []))
        sections[-1][2].append(line)
        sections[-1][3].append(cites)
        previous = line
    return sections


def check_page(page: Path, root: Path = ROOT) -> list[Missing]:
    missing: list[Missing] = []
    rel_page = page.relative_to(root).as_posix() if page.is_relative_to(root) else str(page)
    folders = page.name == "README.md" and rel_page.startswith(RESULTS)
    for first, title, lines, citing in _sections(page.read_text(encoding="utf-8"), folders):
        cited = tuple(sorted({m.group(1) for m in _REF.finditer("\n".join(citing).replace("`", " "))}))
        files = list(dict.fromkeys(p for ref in cited for p in resolve(ref, page, root)))
        prose_lines = _INLINE_CODE.sub(_blank, "\n".join(lines)).split("\n")
        for offset, line in enumerate(prose_lines):
            prose = _LINK_TARGET.sub("]()", line)
            for match in _FIGURE.finditer(prose):
                sign, figure, unit = match.groups()
                if "." not in figure and not unit:
                    continue  # counts, steps, K: bare integers are not checked (with a unit joined, they are)
                if _VERSION_AFTER.search(prose[: match.start()]):
                    continue
                if unit == "%" and figure in _LEVELS and _LEVEL.match(prose[match.end():]):
                    continue
                if re.fullmatch(r"\d{4}\.\d{4,5}", figure):
                    continue  # an arXiv id
                if not _found(figure, unit or "", files):
                    missing.append(Missing(rel_page, first + offset, title, sign + figure + (unit or ""), cited))
    return missing


def check(paths: list[Path] | None = None, root: Path = ROOT) -> list[Missing]:
    return list(itertools.chain.from_iterable(check_page(p, root) for p in (paths or pages(root))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="*", type=Path, help="pages to check (default: docs/ and the results READMEs)")
    args = parser.parse_args(argv)
    missing = check([p.resolve() for p in args.pages] or None)
    for item in missing:
        print(item)
    n_pages = len(args.pages) or len(pages())
    print(f"{len(missing)} figure(s) not found in a file their section cites ({n_pages} pages)", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
