"""A release a paper can cite (issue 47): `python -m build` gives a wheel and an sdist; each installs in a
fresh virtual environment and answers `--version` (both CLIs) and the quick start's `--help`; the package
description (the README) links absolutely, the metadata carries the project URLs, and the citation file
names the software and the paper."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import skillrise_gym

ROOT = Path(__file__).resolve().parent.parent
VERSION = skillrise_gym.__version__

pytest.importorskip("build", reason="the dev extra: pip install -e '.[dev]'")


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # the sdist, then the wheel from it (as a package index would); --no-isolation: the build backend of this environment (setuptools, pinned by pyproject's build-system
    # requirement), so the test needs no download; the sdist's own install below builds it isolated
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out),
                           str(ROOT)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


def _one(dist: Path, pattern: str) -> Path:
    found = sorted(dist.glob(pattern))
    assert len(found) == 1, found
    return found[0]


def _markdown_links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_the_readme_is_a_package_description_with_absolute_links():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    relative = [link for link in _markdown_links(text) if not link.startswith(("https://", "http://", "#"))]
    assert not relative, f"relative links break on a package index: {relative}"


@pytest.mark.slow
def test_the_wheel_holds_the_packages_their_types_license_urls_and_readme(dist):
    wheel = _one(dist, f"skillrise_gym-{VERSION}-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = Parser().parsestr(archive.read(f"skillrise_gym-{VERSION}.dist-info/METADATA").decode())
    assert "skillrise_gym/py.typed" in names and "skillrise_train/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "scripts/", "docs/"))]
    assert any(n.endswith("licenses/LICENSE") for n in names)
    urls = dict(value.split(", ", 1) for value in metadata.get_all("Project-URL"))
    assert {"Homepage", "Documentation", "Repository", "Changelog", "Paper"} <= set(urls)
    assert metadata["License-Expression"] == "MIT" and metadata["Version"] == VERSION
    assert "docs" in metadata.get_all("Provides-Extra")
    assert metadata.get_payload().startswith("# SkillRise Gym")  # the README is the description
    sdist = _one(dist, f"skillrise_gym-{VERSION}.tar.gz")
    with tarfile.open(sdist) as archive:
        members = archive.getnames()
    assert f"skillrise_gym-{VERSION}/LICENSE" in members and f"skillrise_gym-{VERSION}/pyproject.toml" in members


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    return path / "bin"


def _cli(bin_: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(bin_ / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_the_wheel_and_the_sdist_install_in_a_fresh_venv_and_answer_version(dist, tmp_path, kind):
    artifact = _one(dist, "*.whl" if kind == "wheel" else "*.tar.gz")
    bin_ = _venv(tmp_path / "venv")
    pip = subprocess.run([str(bin_ / "python"), "-m", "pip", "install", "-q", str(artifact)], capture_output=True,
                         text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-2000:]
    for name in ("skillrise-bench", "skillrise-train", "skillrise-data"):
        done = _cli(bin_, name, "--version", cwd=tmp_path)
        assert done.returncode == 0 and done.stdout.strip() == f"{name} {VERSION}", (name, done.stderr[-1000:])
    done = _cli(bin_, "skillrise-train", "--help", cwd=tmp_path)  # the quick start's command
    assert done.returncode == 0 and done.stdout.startswith("usage: skillrise-train"), done.stderr[-1000:]
    done = subprocess.run([str(bin_ / "python"), "-c", "import skillrise_train, skillrise_gym; "
                           "print(skillrise_train.__version__, skillrise_gym.__version__)"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.stdout.split() == [VERSION, VERSION], done.stderr[-1000:]


def test_the_citation_file_names_the_software_and_the_paper():
    yaml = pytest.importorskip("yaml")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["version"] == VERSION and cff["license"] == "MIT"
    paper = cff["references"][0]
    assert paper["identifiers"][0]["value"] == "arXiv:2607.26784" and paper["authors"][0]["family-names"] == "Yao"
    assert cff["repository-code"] in (ROOT / "pyproject.toml").read_text(encoding="utf-8")
