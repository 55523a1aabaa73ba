"""Named evaluation panels (skillrise_gym/panels.py): reserved seeds, hashes of what was played, refusals."""

from __future__ import annotations

import json

import pytest

from skillrise_gym import panels
from skillrise_gym.agents.random_agent import RandomAgent
from skillrise_gym.bench.runner import BenchConfig, run_bench


def _blocks(out):
    return json.loads((out / "summary.json").read_text())["blocks"]


def test_a_named_panel_is_drawn_by_its_reserved_seed_whatever_the_run_seed(tmp_path):
    """--panel dev plays the same sequences for any --seed (the RL seed no longer picks the evaluation's
    sequences), every block records the panel's name, seed, size and hash, and another panel hashes
    differently."""
    runs = {}
    for name, seed, panel in (("a", 0, "dev"), ("b", 3, "dev"), ("c", 0, "test"), ("d", 7, None)):
        out = tmp_path / name
        run_bench(BenchConfig(env="rulebook", out=str(out), K=[2], num_sequences=5, seed=seed, panel=panel,
                              workers=0, progress=False, plots=False), RandomAgent(seed=seed))
        runs[name] = _blocks(out)[0]["panel"]
    assert runs["a"] == runs["b"] == {"name": "dev", "seed": panels.PANELS["dev"], "sequences": 5,
                                      "hash": runs["a"]["hash"]}
    assert runs["c"]["name"] == "test" and runs["c"]["hash"] != runs["a"]["hash"]
    # an unnamed seed equal to dev's reserved seed is the dev panel: the hash is of what was played
    assert runs["d"] == runs["a"]
    ids = [json.loads(line)["sequence_id"] for line in (tmp_path / "a" / "results.jsonl").read_text().splitlines()]
    ids_b = [json.loads(line)["sequence_id"] for line in (tmp_path / "b" / "results.jsonl").read_text().splitlines()]
    assert sorted(ids) == sorted(ids_b)


def test_panel_hash_covers_the_tasks_and_the_engine_options():
    """The hash changes with a task id, the order of sequences, the split or the engine options (R and N name
    other tasks under the same ids), and not with anything else."""
    seqs = [("s0", ["t1", "t2"]), ("s1", ["t3", "t4"])]
    base = panels.panel_hash("rulebook", "test", {"rules": 2}, seqs)
    assert base == panels.panel_hash("rulebook", "test", {"rules": 2}, [("s0", ("t1", "t2")), ("s1", ("t3", "t4"))])
    assert len(base) == 16
    for other in (panels.panel_hash("rulebook", "test", {"rules": 2}, [("s0", ["t1", "t9"]), seqs[1]]),
                  panels.panel_hash("rulebook", "test", {"rules": 2}, seqs[::-1]),
                  panels.panel_hash("rulebook", "train", {"rules": 2}, seqs),
                  panels.panel_hash("rulebook", "test", {"rules": 1}, seqs)):
        assert other != base
    with pytest.raises(panels.PanelMismatch, match="panel hash aaa vs bbb"):
        panels.check_same_panel(("run A", "aaa"), ("run B", "bbb"))
    with pytest.raises(ValueError, match="the named panels are dev, test"):
        panels.panel_seed("holdout")


def test_the_bench_cli_names_the_panel_and_says_what_the_test_panel_is_for(tmp_path, capsys):
    from skillrise_gym.bench.cli import main

    assert main(["--env", "rulebook", "--agent", "expert", "--K", "2", "--num-sequences", "3", "--panel", "test",
                 "--out", str(tmp_path / "t"), "--no-progress", "--no-plots"]) == 0
    captured = capsys.readouterr()
    assert "the test panel is for reporting results" in captured.err
    assert "panel test" in captured.out  # the table's title says how the sequences were drawn
    assert _blocks(tmp_path / "t")[0]["panel"]["name"] == "test"
    with pytest.raises(SystemExit) as exited:
        main(["--env", "rulebook", "--agent", "expert", "--panel", "holdout", "--out", str(tmp_path / "x")])
    assert exited.value.code == 2 and "invalid choice: 'holdout'" in capsys.readouterr().err
    # a run folder played on one panel is not resumed on another
    assert main(["--env", "rulebook", "--agent", "expert", "--K", "2", "--num-sequences", "3", "--panel", "dev",
                 "--out", str(tmp_path / "t"), "--no-progress", "--no-plots"]) == 2
    assert "panel: 'test' in the directory, 'dev' now" in capsys.readouterr().err


def test_the_transfer_experiment_keeps_the_test_panel_for_reports(tmp_path, capsys, transfer_experiment):
    """benchmarks/experiments/transfer_experiment.py: evaluations play --panel dev by default; --panel test
    without --report (a tuning run) is refused with what the test panel is for, before anything runs."""
    assert transfer_experiment.Preset().panel == "dev"
    with pytest.raises(SystemExit) as exited:
        transfer_experiment.main(["--panel", "test", "--work-dir", str(tmp_path / "w"),
                                  "--results-dir", str(tmp_path / "r")])
    assert exited.value.code == 2 and "the test panel is for reporting results" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_the_committed_panel_overlap_is_what_the_panels_hold_and_names_the_played_test_panels(tmp_path, capsys):
    """docs/panels.md renders what the dev and test panels share from benchmarks/results/panel_overlap.json:
    the file is what benchmarks/experiments/panel_overlap.py computes now (a changed number is caught), and
    its test-panel hashes are those the decisive experiment's committed records name, so the counts are of
    the panels that were played."""
    from benchmarks.experiments import decisive_experiment, panel_overlap

    assert panel_overlap.main(["--check"]) == 0, capsys.readouterr().err
    data = json.loads(panel_overlap.OUT.read_text(encoding="utf-8"))
    played = {"R=1": "r1/none-seed0", "R=2": "r2/curates/skillrise-seed0"}
    for row in data["settings"]:
        record = json.loads(decisive_experiment.result_path(played[row["setting"]]).read_text())
        assert record["evaluation"]["panel"]["hash"] == row["hash"]["test"]
        assert row["sequences_shared"] == 0 and 0 < row["tasks"]["shared"] < row["tasks"]["test"]
    moved = tmp_path / "overlap.json"
    moved.write_text(panel_overlap.OUT.read_text(encoding="utf-8").replace('"shared": 32', '"shared": 30', 1))
    assert panel_overlap.main(["--check", "--out", str(moved)]) == 1
    assert "panel_overlap.py" in capsys.readouterr().err
