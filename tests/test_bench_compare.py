"""`skillrise-bench compare`: runs side by side, paired on one panel, refused across envs."""

from __future__ import annotations

import json

from skillrise_gym.bench.cli import main


def bench(out, agent, *extra):
    argv = ["--env", "rulebook", "--agent", agent, "--K", "2", "--num-sequences", "6", "--out", str(out),
            "--no-progress", "--no-plots", *extra]
    assert main(argv) == 0


def test_two_runs_on_one_panel_are_paired_and_written_in_every_format(tmp_path, capsys):
    bench(tmp_path / "expert", "expert", "--panel", "dev")
    bench(tmp_path / "random", "random", "--panel", "dev", "--memory", "skill", "none")
    bench(tmp_path / "other", "random", "--seed", "3")
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "expert"), str(tmp_path / "random"), str(tmp_path / "other"),
                 "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "| expert | 2 | 6 | 1.00" in out and "reference" in out
    table = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert [r["name"] for r in table["rows"]] == ["expert", "random:skill", "random:none", "other"]
    expert = json.loads((tmp_path / "expert" / "results.jsonl").read_text().splitlines()[0])
    assert expert["success"] == [True, True]
    random_rows = [json.loads(line) for line in (tmp_path / "random" / "carry-skill" / "results.jsonl").read_text().splitlines()]
    mean = sum(sum(r["success"]) / 2 for r in random_rows) / len(random_rows)
    assert abs(table["rows"][1]["by_K"]["2"]["difference"]["mean"] - (mean - 1.0)) < 1e-9
    assert table["rows"][3]["by_K"]["2"]["difference"] is None  # another panel: not paired
    assert "other, K=2: played another panel than expert" in out
    # a run cut short on the same panel is paired on the sequences it finished
    bench(tmp_path / "short", "random", "--panel", "dev", "--num-sequences", "3")
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "expert"), str(tmp_path / "short"), "--out", str(tmp_path / "c2")]) == 0
    short = json.loads((tmp_path / "c2" / "compare.json").read_text())["rows"][1]["by_K"]["2"]["difference"]
    assert short["sequences"] == 3
    for name in ("compare.md", "compare.csv", "compare.tex", "compare.png"):
        assert (tmp_path / "cmp" / name).stat().st_size > 0
    assert (tmp_path / "cmp" / "compare.csv").read_text().startswith("run,K,seqs,success [95% CI]")
    assert r"\$/task" in (tmp_path / "cmp" / "compare.tex").read_text()


def test_runs_of_different_envs_and_folders_that_are_not_runs_are_refused(tmp_path, capsys):
    bench(tmp_path / "a", "expert")
    assert main(["--env", "toy", "--agent", "expert", "--K", "2", "--num-sequences", "2", "--out",
                 str(tmp_path / "toy"), "--no-progress", "--no-plots"]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "toy")]) == 2
    assert "the runs are of different envs (rulebook, toy): nothing to compare" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "nowhere")]) == 2
    assert "not a bench run folder" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "a")]) == 2
    assert "at least two runs" in capsys.readouterr().err


def test_webshop_tables_report_score_beside_success():
    from skillrise_gym.bench.compare import lines

    cell = {"sequences": 2, "success": {"mean": 0.5, "ci": [0.1, 0.9]}, "score": {"mean": 0.8125},
            "success_by_position": [0.5], "panel": "p",
            "cost_per_task": {"tokens": 10.0, "model_calls": 1.0, "dollars": None, "curate_share_of_tokens": 0.25}}
    table = {"env": "webshop", "reference": "a", "rows": [{"name": "a", "by_K": {"1": cell}}], "notes": []}
    header, row = lines(table)
    assert header[3:5] == ["success [95% CI]", "score"] and row[3:5] == ["0.50 [0.10, 0.90]", "0.812"]
