"""Results are generated, never copied (issue 47): every marked results block in README.md and docs/ is what
scripts/render_results.py renders from the committed JSON; a stale block, a JSON of an unknown shape and a
bad marker are errors naming the file (and the field or the line)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import render_results  # noqa: E402
from results_tables import TABLES, RenderError, Results  # noqa: E402
from results_tables.blocks import blocks, replace_blocks  # noqa: E402


def test_every_results_block_in_the_readme_and_docs_is_what_the_json_gives(capsys):
    """The regeneration test: rerendering changes nothing. If it fails, a JSON changed (or a block was edited by
    hand): run `python scripts/render_results.py` and commit the result."""
    assert render_results.main(["--check"]) == 0, capsys.readouterr().err
    used = set()
    for path in render_results.documents():
        if path.is_file():
            used.update(b.name for b in blocks(path.read_text(encoding="utf-8"), path))
    assert used == set(TABLES), f"registered but used nowhere: {set(TABLES) - used}"
    assert "transfer/r1-tiny" in {b.name for b in blocks((ROOT / "README.md").read_text(encoding="utf-8"))}


def _repo(tmp_path: Path, page: str) -> Path:
    """A repository of one docs page and a copy of the committed results."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(page, encoding="utf-8")
    shutil.copytree(ROOT / "benchmarks" / "results", tmp_path / "benchmarks" / "results",
                    ignore=shutil.ignore_patterns("*.png", "decisive"))
    return tmp_path


def test_a_stale_block_is_named_by_check_and_rewritten_without_it(tmp_path, capsys):
    root = _repo(tmp_path, "# Page\n\nbefore\n<!-- results: transfer/r1-tiny -->\n| typed | by hand |\n"
                           "<!-- /results -->\nafter\n")
    assert render_results.main(["--check", "--root", str(root)]) == 1
    assert "docs/page.md: stale" in capsys.readouterr().err
    assert "typed" in (root / "docs" / "page.md").read_text()  # --check writes nothing
    assert render_results.main(["--root", str(root)]) == 0
    text = (root / "docs" / "page.md").read_text()
    assert "typed" not in text and "**SkillRise**" in text and text.startswith("# Page\n\nbefore\n")
    assert text.endswith("<!-- /results -->\nafter\n")
    assert render_results.main(["--check", "--root", str(root)]) == 0


def test_a_json_of_an_unknown_shape_names_the_file_and_the_missing_field(tmp_path, capsys):
    root = _repo(tmp_path, "<!-- results: transfer/r1-tiny -->\n<!-- /results -->\n")
    path = root / "benchmarks" / "results" / "transfer_experiment.json"
    data = json.loads(path.read_text())
    del data["evaluations"]["skillrise"]["by_carry"]["skill"]["6"]
    path.write_text(json.dumps(data))
    assert render_results.main(["--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert "benchmarks/results/transfer_experiment.json" in err
    assert "evaluations.skillrise.by_carry.skill.6" in err
    path.write_text("{not json")
    assert render_results.main(["--root", str(root)]) == 2
    assert "transfer_experiment.json: not JSON" in capsys.readouterr().err


@pytest.mark.parametrize("page, said", [
    ("x\n<!-- results: no/such-table -->\n<!-- /results -->\n", "docs/page.md:2: unknown results table 'no/such-table'"),
    ("<!-- results: transfer/r1-tiny -->\nno end\n", "docs/page.md:1: the block 'transfer/r1-tiny' is never closed"),
    ("a\nb\n<!-- /results -->\n", "docs/page.md:3: <!-- /results --> with no block open"),
    ("<!-- results transfer/r1-tiny -->\n", "docs/page.md:1: malformed results marker"),
], ids=["unknown", "unclosed", "stray-close", "malformed"])
def test_a_bad_marker_is_an_error_naming_the_file_and_line(tmp_path, capsys, page, said):
    root = _repo(tmp_path, page)
    before = (root / "docs" / "page.md").read_text()
    assert render_results.main(["--root", str(root)]) == 2
    assert said in capsys.readouterr().err
    assert (root / "docs" / "page.md").read_text() == before  # loses nothing


def test_blocks_are_replaced_in_place_and_the_rest_kept_byte_for_byte():
    text = "a\n<!-- results: t -->\nold\nold\n<!-- /results -->\nb\n<!-- results: t -->\n<!-- /results -->"
    assert replace_blocks(text, {"t": "new\n"}) == ("a\n<!-- results: t -->\nnew\n<!-- /results -->\nb\n"
                                                    "<!-- results: t -->\nnew\n<!-- /results -->")


def test_the_tables_render_from_the_committed_json_alone():
    results = Results(ROOT / "benchmarks" / "results")
    for name, render in TABLES.items():
        text = render(results)
        assert ("Rendered from `benchmarks/results/" in text or "Not reported yet" in text
                or "Generated from `skillrise_train.config.TrainConfig`" in text), name


def test_the_decisive_report_is_rendered_by_the_experiments_own_markdown_once_written(tmp_path):
    """Before `decisive_experiment.py report` the block says so; after, it is the report's tables (the same
    renderer as decisive.md), naming the test panel."""
    from benchmarks.experiments import decisive_experiment

    results = tmp_path / "results"
    shutil.copytree(ROOT / "benchmarks" / "results" / "decisive", results / "decisive")
    (results / "decisive" / "decisive.json").unlink(missing_ok=True)
    assert "Not reported yet" in TABLES["decisive/report"](Results(results))
    assert decisive_experiment.main(["report", "--results-dir", str(results / "decisive")]) == 0
    text = TABLES["decisive/report"](Results(results))
    assert "Stages done:" in text and "test panel" in text and "Rendered from `benchmarks/results/decisive/decisive.json`" in text
    report = json.loads((results / "decisive" / "decisive.json").read_text())
    del report["r2"]
    (results / "decisive" / "decisive.json").write_text(json.dumps(report))
    with pytest.raises(RenderError, match=r"decisive/decisive.json: no field 'r2'"):
        TABLES["decisive/report"](Results(results))


def test_the_readme_quotes_no_measured_figure_outside_its_generated_blocks():
    """The README's only results are rendered blocks: outside them (and outside code), no speedup, timing,
    memory size, rate or percentage is typed, so none can drift from its JSON."""
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count("```") % 2 == 0, "an unclosed code fence"
    prose = re.sub(r"<!-- results: .*? -->.*?<!-- /results -->", "", text, flags=re.S)
    prose = re.sub(r"```.*?```", "", prose, flags=re.S)
    figure = re.compile(r"\b\d+(?:\.\d+)?x\b|\b\d+(?:\.\d+)? ?(?:ms|s|GB|MB|GiB|MiB|min|minutes|hours|tokens/s)\b"
                        r"|\b0\.\d+\b|\d+(?:\.\d+)?%")
    typed = [(m.group(), line.strip()) for line in prose.splitlines() for m in figure.finditer(line)]
    assert not typed, f"figures typed in the README (render them from a JSON): {typed}"


def test_every_figure_in_the_docs_prose_is_found_in_a_file_its_section_cites():
    """The prose of docs/ and of benchmarks/results/**/README.md types no figure that the files it cites do not
    hold (scripts/check_figures.py): no derived difference, no drifted rate."""
    import check_figures

    missing = check_figures.check()
    assert not missing, "figures not found in a cited file:\n" + "\n".join(map(str, missing))


def test_check_figures_names_an_uncited_or_derived_figure_and_skips_versions_code_and_tables(tmp_path, capsys):
    import check_figures

    results = tmp_path / "benchmarks/results"
    (results / "run").mkdir(parents=True)
    (results / "run/a.json").write_text(json.dumps({"success": 0.6123, "ci": [0.55, 0.67], "share": 0.52, "n": 37}))
    (results / "other/run").mkdir(parents=True)
    (results / "other/run/a.json").write_text(json.dumps({"success": 0.44}))
    (tmp_path / "runs/local").mkdir(parents=True)  # a local work dir: not committed data
    (tmp_path / "runs/local/b.json").write_text(json.dumps({"success": 0.33}))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_x.py").write_text("assert abs(x - y) <= 0.045\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/rulebook.md").write_text(
        "# Results\n\n"
        "Success 0.61 [0.55, 0.67], 52% of turns (`run/a.json`). A derived difference +0.06.\n\n"
        "## Elsewhere\n\n"
        "Uncited 0.61 on alfworld 0.4.2 and Python 3.10, 3.12 and 3.13, 40 steps, 3x faster, 250 MB, a 95% CI, `gamma 0.6`.\n\n"
        "<!-- results: x -->\n| 0.99 |\n<!-- /results -->\n\n"
        "```\n0.77\n```\n\n~~~\n0.78\n~~~\n\n    python run.py --penalty 2.0\n\n"
        "**A bold title.** Within 0.045 (`tests/test_x.py`), and `--lr 0.3` is code.\n\n"
        "## Counts are not shares\n\n"
        "37% of turns, .44 and 0.33 (`run/a.json`, `runs/local/`): 0.44 is the other run's, not cited here.\n")
    (results / "run/README.md").write_text("run/ (the run): 0.61 and 0.67.\n\nnothing/ (no JSON): 0.55.\n")
    missing = check_figures.check(root=tmp_path)
    said = [(m.page, m.line, m.section, m.figure) for m in missing]
    assert said == [("benchmarks/results/run/README.md", 3, "nothing/", "0.55"),
                    ("docs/rulebook.md", 3, "Results", "+0.06"),
                    ("docs/rulebook.md", 7, "Elsewhere", "0.61"),
                    ("docs/rulebook.md", 7, "Elsewhere", "3x"),  # an integer with a unit is a measurement
                    ("docs/rulebook.md", 7, "Elsewhere", "250 MB"),
                    ("docs/rulebook.md", 27, "Counts are not shares", "37%"),
                    ("docs/rulebook.md", 27, "Counts are not shares", ".44"),
                    ("docs/rulebook.md", 27, "Counts are not shares", "0.33"),
                    ("docs/rulebook.md", 27, "Counts are not shares", "0.44")], said
    assert "no file cited in this section" in str(missing[2])
    assert "run/a.json" in str(missing[1])
