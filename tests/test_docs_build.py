"""The documentation site builds strictly (issue 47): `mkdocs build --strict` over docs/ with the API
reference generated from docstrings; a broken link or a missing API symbol fails the build naming where."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
pytest.importorskip("mkdocstrings")


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=600, env=env)


def _copy(tmp_path: Path) -> Path:
    """A repository of the docs (copied, to break) and the code they document (linked)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", repo / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", repo / "docs")
    for name in ("skillrise_gym", "skillrise_train", "CHANGELOG.md", "benchmarks"):
        (repo / name).symlink_to(ROOT / name)
    return repo


@pytest.mark.slow
def test_the_site_builds_strictly_with_its_api_reference(tmp_path):
    done = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-3000:]
    site = tmp_path / "site"
    for page in ("index.html", "envs/index.html", "results/index.html", "api/train/index.html", "changelog/index.html"):
        assert (site / page).is_file(), page
    api = (site / "api" / "train" / "index.html").read_text(encoding="utf-8")
    assert "TrainConfig" in api and "curate_credit" in api  # generated from the dataclass, not typed
    assert "Keep a Changelog" in (site / "changelog" / "index.html").read_text(encoding="utf-8")
    assert any((site / "results" / "figures").glob("*.png"))  # the committed figures, served as they are


@pytest.mark.slow
@pytest.mark.parametrize("breakage, said", [
    ("See [the trainer](no-such-page.md).", "'no-such-page.md'"),
    ("See [the trainer](train.md#no-such-section).", "#no-such-section"),
    ("::: skillrise_gym.no_such_symbol", "skillrise_gym.no_such_symbol could not be found"),
], ids=["page", "anchor", "api-symbol"])
def test_a_broken_link_or_a_missing_api_symbol_fails_the_build_naming_it(tmp_path, breakage, said):
    repo = _copy(tmp_path)
    page = repo / "docs" / "install.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n" + breakage + "\n", encoding="utf-8")
    done = _build(repo / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert said in done.stderr and ("install.md" in done.stderr or "api" in breakage or ":::" in breakage), done.stderr
