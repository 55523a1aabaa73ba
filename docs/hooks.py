"""mkdocs hook: the committed result figures (benchmarks/results/*.png) served under results/figures/, so the
docs show the files the benchmarks wrote rather than copies of them."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "benchmarks" / "results"


def on_files(files, config):
    for png in sorted(FIGURES.glob("*.png")):
        files.append(File.generated(config, f"results/figures/{png.name}", abs_src_path=str(png)))
    return files
