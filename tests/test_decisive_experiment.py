"""benchmarks/experiments/decisive_experiment.py at toy size: every stage through the real trainer and bench
(the tiny offline model, 2 RL steps, 6 held-out sequences), resumed from its JSON, reported from the JSON alone,
and its comparisons refused across panels."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

from benchmarks.experiments import decisive_experiment  # noqa: E402


@pytest.fixture
def toy(monkeypatch):
    """The experiment at toy sizes (its settings patched for the test, put back after it)."""
    module = decisive_experiment
    te = module.te
    tiny = dict(model="tiny", lora=False, max_new_tokens=24, dtype="float32", threads=1, G=2, S=1, lr=1e-3)
    evaluation = dict(panel="test", eval_K=[6], eval_sequences=6, eval_carry=["skill"])
    monkeypatch.setattr(module, "WARMSTART", te.Preset(**{**tiny, "rules": 2, "bins": 4, "K": 3, "warmstart_steps": 2,
                                                          "warmstart_sequences": 10, "warmstart_reading_first": 0}))
    monkeypatch.setattr(module, "R1", te.Preset(**{**tiny, **evaluation, "rules": 1, "bins": 3, "K": 2, "steps": 1,
                                                   "warmstart_steps": 0}))
    monkeypatch.setattr(module, "R2", te.Preset(**{**tiny, **evaluation, "rules": 2, "bins": 4, "K": 4, "steps": 1,
                                                   "warmstart_steps": 0}))
    monkeypatch.setattr(module, "SEEDS", (0, 1))
    monkeypatch.setattr(module, "INITS", {"curates": ("r1/skillrise-seed1",), "cannot": ("r1/none-seed0", "r1/none-seed1")})
    # the tiny model's R=1 runs keep no promise about curating (test_an_init_is_the_first_candidate_that_keeps...)
    monkeypatch.setattr(module, "INIT_PROMISE", {"curates": (0.0, 1.0), "cannot": (0.0, 1.0)})
    return module


def test_every_stage_runs_resumes_and_is_reported_from_its_json(toy, tmp_path, capsys):
    results, work = tmp_path / "results", tmp_path / "work"
    argv = ["--work-dir", str(work), "--results-dir", str(results)]
    assert toy.main(["run", "--only", "warmstart", "r1/skillrise-seed1", *argv]) == 0
    assert sorted(p.name for p in (results / "r1").iterdir()) == ["skillrise-seed1.json"]
    assert toy.main(["run", *argv]) == 0
    names = toy.stages()
    assert all(toy.result_path(n, results).is_file() for n in names)
    first = json.loads(toy.result_path("r2/cannot/skillrise-seed0", results).read_text())
    assert first["evaluation"]["panel"]["name"] == "test" and len(first["evaluation"]["per_sequence"]) == 6
    assert first["episode"]["backend_options"] == {"rules": 2, "bins": 4} and first["episode"]["K"] == 4
    # the init that cannot curate is the first R=1 none run keeping its promise (relaxed here): seed 0
    assert first["start"]["digest"] == json.loads(toy.result_path("r1/none-seed0", results).read_text())["model"]["digest"]
    # only the inits' R=1 runs are packed: not the rows no R=2 arm starts from
    assert set(json.loads((results / "inits" / "manifest.json").read_text())) == {"warmstart", "r1/skillrise-seed1",
                                                                                     "r1/none-seed0"}
    # a rerun finds every stage's JSON and runs nothing
    stamp = {n: toy.result_path(n, results).stat().st_mtime_ns for n in names}
    assert toy.main(["run", *argv]) == 0
    assert stamp == {n: toy.result_path(n, results).stat().st_mtime_ns for n in names}
    capsys.readouterr()
    assert toy.main(["report", "--results-dir", str(results)]) == 0
    report = json.loads((results / "decisive.json").read_text())
    assert report["stages_left"] == []
    assert report["inits"] == {"curates": "r1/skillrise-seed1", "cannot": "r1/none-seed0"}
    assert "Inits: curates: r1/skillrise-seed1; cannot: r1/none-seed0" in toy.markdown(report)
    assert set(report["r2"]["cannot"]["paired"]) == {"skillrise - none", "skillrise - own", "skillrise - init",
                                                      "norepeat - skillrise", "norepeat - none"}
    block = report["r2"]["cannot"]["paired"]["skillrise - none"]
    assert set(block["per_seed"]) == {"0", "1"} and block["over_seeds"]["seeds"] == 2
    assert block["verdict"] in ("above", "below", "tie") and f"| {block['verdict']} |" in toy.markdown(report)
    # the verdicts table (the README's headline) has a row for every planned comparison, with that verdict
    table = toy.verdicts(report)
    assert table.count("| the init that cannot curate, R=2 |") == len(toy.r2_comparisons()) == 5
    assert (f"| SkillRise minus `none` | the init that cannot curate, R=2 | 2 of 2 | {block['over_seeds']['positive']} "
            f"of 2 | {block['over_seeds']['mean']:+.3f} [") in table and table.split("\n")[8].endswith(f"| {block['verdict']} |")
    assert "## Verdicts\n\n" + table in toy.markdown(report)
    assert report["r2"]["cannot"]["same_start"] is True
    assert (results / "decisive.md").read_text() == toy.markdown(report)
    # the per-seed difference is the mean of the per-sequence differences at the pre-registered positions
    mine = json.loads(toy.result_path("r2/cannot/skillrise-seed1", results).read_text())["evaluation"]["per_sequence"]
    other = json.loads(toy.result_path("r2/cannot/none-seed1", results).read_text())["evaluation"]["per_sequence"]
    a, b = toy.MEASURE
    expected = sum(sum(mine[s][a:b]) - sum(other[s][a:b]) for s in mine) / (b - a) / len(mine)
    assert block["per_seed"]["1"]["difference"] == pytest.approx(expected, abs=1e-4)
    # an arm evaluated on another panel cannot be paired
    path = toy.result_path("r2/cannot/none-seed1", results)
    record = json.loads(path.read_text())
    record["evaluation"]["panel"]["hash"] = "0" * 16
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="different panels"):
        toy.analyse(results)


def test_a_fresh_machine_evaluates_an_init_on_the_committed_episode_without_retraining_its_arm(toy, tmp_path):
    """The init stage plays the R=2 arms' episode. On a machine without the SkillRise seed-0 arm's folder (a new
    session) it reads that episode from the arm's committed record instead of retraining the arm to learn it,
    and scores the init exactly as on the machine that had the folder."""
    results, work = tmp_path / "results", tmp_path / "work"
    argv = ["--work-dir", str(work), "--results-dir", str(results)]
    assert toy.main(["run", "--only", "warmstart", "r1/skillrise-seed1", "r2/curates/skillrise-seed0",
                     "r2/curates/init", *argv]) == 0
    init = toy.result_path("r2/curates/init", results)
    before = json.loads(init.read_text())["evaluation"]
    arm = work / "r2" / "curates" / "seed0" / "skillrise"
    import shutil

    shutil.rmtree(arm)
    shutil.rmtree(work / "r2" / "curates" / "init")
    init.unlink()
    assert toy.main(["run", "--only", "r2/curates/init", *argv]) == 0
    assert not arm.exists()  # the arm was not retrained
    after = json.loads(init.read_text())["evaluation"]
    assert after["per_sequence"] == before["per_sequence"] and after["panel"] == before["panel"]


def test_the_inits_are_committed_and_a_fresh_machine_restores_them_instead_of_retraining(toy, tmp_path, monkeypatch,
                                                                                       capsys):
    """Retraining an init on another machine does not give the same bits, so the stages that later stages start
    from (the warm start, an init's R=1 run) pack their LoRA adapters into the results folder, and a machine
    without the work dir restores them, checked against the manifest and the stage's recorded digest: the R=2
    arm then starts from the very init the R=1 stage recorded. A damaged committed file is refused, named."""
    import shutil
    from dataclasses import replace

    for name in ("R1", "R2"):
        monkeypatch.setattr(toy, name, replace(getattr(toy, name), lora=True))
    monkeypatch.setattr(toy, "WARMSTART", replace(toy.WARMSTART, lora=True, warmstart_reading_first=2))
    results, work = tmp_path / "results", tmp_path / "work"
    assert toy.main(["run", "--only", "warmstart", "r1/skillrise-seed1", "--work-dir", str(work),
                     "--results-dir", str(results)]) == 0
    inits = results / "inits"
    manifest = json.loads((inits / "manifest.json").read_text())
    assert set(manifest) == {"warmstart", "r1/skillrise-seed1"}
    assert "warmstart/reading-first-adapter/adapter_model.safetensors" in manifest["warmstart"]
    assert "warmstart/untrained/adapter_model.safetensors" in manifest["warmstart"]
    assert {"r1/seed1/skillrise/final/adapter_model.safetensors", "r1/seed1/skillrise/config.json",
            "r1/seed1/skillrise/metrics.jsonl"} <= set(manifest["r1/skillrise-seed1"])
    config = json.loads((inits / "warmstart/untrained/adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "{WORK}/warmstart/reading-first"  # no machine's path committed
    shutil.rmtree(work)  # a fresh machine: nothing of the work dir, nothing it named

    fresh = tmp_path / "fresh"
    capsys.readouterr()
    assert toy.main(["run", "--only", "r2/curates/skillrise-seed0", "--work-dir", str(fresh),
                     "--results-dir", str(results)]) == 0
    out = capsys.readouterr().out
    assert "[inits] warmstart restored" in out and "[inits] r1/skillrise-seed1 restored" in out
    assert "[reading-first]" not in out and "[untrained]" not in out  # neither warm start retrained
    run = fresh / "r1" / "seed1" / "skillrise"
    assert sorted(p.name for p in run.iterdir()) == ["config.json", "final", "metrics.jsonl", "wall_seconds.txt"]
    r1 = json.loads(toy.result_path("r1/skillrise-seed1", results).read_text())
    arm = json.loads(toy.result_path("r2/curates/skillrise-seed0", results).read_text())
    assert arm["start"]["digest"] == r1["model"]["digest"]
    assert json.loads((fresh / "warmstart/untrained/adapter_config.json").read_text())["base_model_name_or_path"] \
        == str((fresh / "warmstart" / "reading-first").resolve())

    # a committed file damaged: refused, named, nothing trained
    damaged = inits / "r1/seed1/skillrise/final/adapter_model.safetensors"
    damaged.write_bytes(damaged.read_bytes()[:-8])
    toy.result_path("r2/curates/skillrise-seed0", results).unlink()
    assert toy.main(["run", "--only", "r2/curates/skillrise-seed0", "--work-dir", str(tmp_path / "fresh2"),
                     "--results-dir", str(results)]) == 2
    err = capsys.readouterr().err
    assert str(damaged) in err and "differs from" in err


def test_an_init_is_the_first_candidate_that_keeps_its_promise_else_the_r2_arms_stop(tmp_path, capsys):
    """An R=1 run's outcome is not fixed by its seed across machines, so each init is the first of its candidate
    R=1 runs whose documents keep INIT_PROMISE; a candidate not run yet, or none keeping it, refuses every R=2
    stage from that init, naming the files. Only the chosen run is packed with the inits, also when it became
    the init after its own record landed; an init whose model is missing or has other bits is never retrained."""
    module = decisive_experiment
    results, work = tmp_path / "results", tmp_path / "work"
    experiment = module.Experiment(work, results, print)
    first, second, third = module.INITS["cannot"]

    def record(stage, share):
        final = work / module.r1_folder(stage) / "final"
        final.mkdir(parents=True, exist_ok=True)
        (final / "adapter_model.safetensors").write_bytes(f"{stage} weights".encode())
        for name in ("config.json", "metrics.jsonl", "wall_seconds.txt"):
            (final.parent / name).write_text("{}")
        path = module.result_path(stage, results)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"evaluation": {"documents": {"states_all": share}},
                                    "model": {"digest": module.weights_digest(final)}}))
        return path

    record(second, 0.05)  # keeps the promise, but an earlier candidate has not run
    with pytest.raises(module.te.Refused, match=f"{first} has not run yet"):
        experiment._r2("cannot", "none", 0)
    assert module.init_stage("cannot", results, strict=False) is None and experiment.pack_inits() == []
    record(first, 0.72)  # learned to state the rule: not an init that cannot curate; the second becomes the init
    assert module.init_stage("cannot", results) == second
    assert module.packed_paths(first, results) == ()
    assert experiment.pack_inits() == [second]  # packed now, though its own record landed earlier
    assert "r1/seed1/none/final/adapter_model.safetensors" in experiment.manifest()[second]
    capsys.readouterr()
    assert module.main(["status", "--results-dir", str(results), "--work-dir", str(work)]) == 0
    assert f"init  cannot: {second}" in capsys.readouterr().out

    # the init's model with other bits than its record names, or absent: refused, nothing retrained
    final = work / "r1" / "seed1" / "none" / "final"
    (final / "adapter_model.safetensors").write_bytes(b"retrained elsewhere")
    with pytest.raises(module.te.Refused, match="not the init its record describes"):
        experiment._r2("cannot", "none", 0)
    import shutil

    shutil.rmtree(final.parent)
    (results / "inits" / "manifest.json").unlink()
    with pytest.raises(module.te.Refused, match="neither in"):
        experiment._r2("cannot", "none", 0)
    assert not (work / "warmstart").exists()  # no warm start built, no init retrained

    record(second, 0.5)
    path = record(third, None)  # no curate turn measured: keeps nothing
    for refused_stage in (lambda: experiment._r2("cannot", "none", 0), lambda: experiment.run_stage("r2/cannot/init")):
        with pytest.raises(module.te.Refused, match="choose the init again") as refused:
            refused_stage()
        assert str(path) in refused.value.message and str(module.result_path(first, results)) in refused.value.message
    assert module.packed_paths(second, results) == ()
    assert module.not_chosen(module.init_choice("cannot", results)[1]) == "none keeps its promise"

    (curates,) = module.INITS["curates"]
    record(curates, 0.5)
    with pytest.raises(module.te.Refused, match="the init that curates"):
        experiment.run_stage("r2/curates/skillrise-seed0")
    record(curates, 0.95)
    assert module.init_stage("curates", results) == curates


def test_status_and_a_bad_stage_prefix(toy, tmp_path, capsys):
    assert toy.main(["status", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"0 of {len(toy.stages())} stages done" in out
    with pytest.raises(SystemExit) as exited:
        toy.main(["run", "--only", "r3/", "--results-dir", str(tmp_path)])
    assert exited.value.code == 2 and "no stage starts with r3/" in capsys.readouterr().err


def test_the_stages_are_whole_seeds_in_order():
    """Every R=1 run first (both inits' candidates among them), then one RL seed of every R=2 arm from both
    inits at a time."""
    names = decisive_experiment.stages()
    r1 = [f"r1/{arm}-seed{s}" for arm in ("skillrise", "none") for s in (0, 1, 2)]
    assert names[:8] == ["warmstart", *r1, "r2/reference"]
    assert all(stage in r1 for candidates in decisive_experiment.INITS.values() for stage in candidates)
    assert len(names) == len(set(names)) == 8 + 2 * 3 * 3 + 2 + 2 * 3
    main = [n for n in names if n.startswith("r2/") and "seed" in n and "norepeat" not in n]
    seeds = [int(n.rsplit("seed", 1)[1]) for n in main]
    assert seeds == sorted(seeds)  # a partial experiment is whole seeds
    assert all("norepeat" in n for n in names[-6:])  # the change of method comes after the main arms


def test_status_says_where_an_unfinished_arm_stands_in_the_work_dir(tmp_path, capsys):
    """A session ends mid-arm: `status` says how many steps are recorded and which checkpoint a rerun
    continues from, so whoever picks the experiment up knows what the next `run` costs."""
    work, results = tmp_path / "work", tmp_path / "results"
    arm = work / "r2" / "curates" / "seed0" / "skillrise"
    (arm / "checkpoint-5").mkdir(parents=True)
    (arm / "checkpoint-10").mkdir()
    (arm / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "success/mean": 0.5}) + "\n" for s in range(1, 13)))
    fresh = work / "r2" / "curates" / "seed0" / "none"
    fresh.mkdir(parents=True)
    (fresh / "metrics.jsonl").write_text(json.dumps({"step": 1, "success/mean": 0.5}) + "\n")
    assert decisive_experiment.main(["status", "--work-dir", str(work), "--results-dir", str(results),
                                     "--only", "r2/curates/"]) == 0
    out = capsys.readouterr().out
    steps = decisive_experiment.R2.steps
    assert f"left  r2/curates/skillrise-seed0  (in progress: 12 of {steps} steps recorded, newest checkpoint 10 " \
           "(a rerun continues from it))" in out
    assert "left  r2/curates/none-seed0  (in progress: 1 of" in out and "none yet (a rerun starts it over)" in out
    assert "left  r2/curates/own-seed0\n" in out  # nothing of it in the work dir


def test_a_comparison_is_decided_only_over_every_planned_seed_and_an_interval_across_0_is_a_tie():
    v = decisive_experiment.verdict
    assert v({"seeds": 1, "ci": None, "mean": 0.08}) == "not decided (1 of 3 seeds)"
    assert v({"seeds": 2, "ci": [0.01, 0.2], "mean": 0.1}) == "not decided (2 of 3 seeds)"
    assert v({"seeds": 3, "ci": [0.01, 0.2], "mean": 0.1}) == "above"
    assert v({"seeds": 3, "ci": [-0.3, -0.05], "mean": -0.2}) == "below"
    assert v({"seeds": 3, "ci": [-0.01, 0.3], "mean": 0.15}) == "tie"  # every seed above 0 or not: the interval decides
    assert v({"seeds": 2, "ci": [0.01, 0.2], "mean": 0.1}, planned=2) == "above"
    assert v({"seeds": 3, "ci": [0.0, 0.2], "mean": 0.1}) == "tie"  # a bound at 0 is not above it


def test_the_interval_over_seeds_is_students_t_with_seeds_minus_one_degrees_of_freedom():
    """Hand-computed: mean, sd with n - 1, t quantile 12.706 (df 1) / 4.303 (df 2) / 2.447 (df 6: a normal
    1.96 would be too narrow); one seed has no interval, none is refused."""
    over = decisive_experiment.over_seeds
    assert over([0.08, 0.11]) == {"mean": 0.095, "ci": [-0.0956, 0.2856], "seeds": 2, "positive": 2}
    three = over([0.61, 0.78, 0.71])  # the R=1 comparison: sd 0.0854, half 4.303 x 0.0854 / sqrt 3
    assert three["ci"] == [0.4878, 0.9122] and three["positive"] == 3
    seven = over([0.1, 0.2, 0.0, 0.1, 0.2, 0.0, 0.1])  # sd 0.0816, half 2.447 x 0.0816 / sqrt 7 = 0.0755
    assert seven["ci"] == [0.0245, 0.1755]
    assert over([0.08]) == {"mean": 0.08, "ci": None, "seeds": 1, "positive": 1}
    with pytest.raises(ValueError, match="at least one seed"):
        over([])


def test_arms_and_the_init_evaluated_must_share_their_start_bits():
    """The init's own evaluation counts: an init rebuilt after it was evaluated (other bits) breaks the pairing
    of 'minus its init' even when every arm started from the same bits."""
    digests = decisive_experiment.start_digests
    done = {"r2/curates/init": {"model": {"digest": "a"}}, "r2/curates/none-seed0": {"start": {"digest": "a"}},
            "r2/curates/skillrise-seed0": {"start": {"digest": "a"}}, "r2/cannot/init": {"model": {"digest": "z"}}}
    assert digests(done, "curates") == {"a"} and digests(done, "cannot") == {"z"}
    done["r2/curates/init"] = {"model": {"digest": "b"}}
    assert digests(done, "curates") == {"a", "b"}


def test_a_per_seed_difference_is_paired_by_sequence_on_positions_2_to_5():
    """Two arms on the same three sequences: the difference is taken per sequence, at positions 2-5 only, then
    bootstrapped; an arm that is the other plus a constant has a zero-width interval (a paired bootstrap)."""
    def arm(rows):
        return {"what": "x", "evaluation": {"panel": {"hash": "h"}, "per_sequence": rows}}

    mine = arm({"a": [0, 0, 1, 1, 1, 1], "b": [1, 1, 1, 0, 1, 0], "c": [0, 1, 0, 0, 1, 1]})
    other = arm({"a": [1, 1, 1, 1, 0, 1], "b": [0, 0, 0, 0, 1, 0], "c": [1, 0, 0, 0, 0, 1]})  # each 0.25 below
    result = decisive_experiment.paired(mine, other)
    assert result == {"difference": 0.25, "ci": [0.25, 0.25], "sequences": 3}


def test_the_verdicts_table_lists_every_planned_comparison_before_it_lands():
    """A comparison no stage has reached yet is a row that says so (0 of 3 seeds), not a missing row: the README
    shows what is planned beside what is decided."""
    module = decisive_experiment
    report = {"verdict_rule": "rule", "r2": {"curates": {"paired": {"skillrise - none": {
        "over_seeds": module.over_seeds([0.08]), "per_seed": {"0": {"difference": 0.08, "ci": [0.04, 0.12]}}}}}}}
    rows = module.verdicts(report).split("\n")
    assert rows[2] == "| SkillRise minus `none` | the warm start, R=1 | 0 of 3 | - | - | not decided (0 of 3 seeds) |"
    assert rows[3] == ("| SkillRise minus `none` | the init that curates, R=2 | 1 of 3 | 1 of 1 | +0.080 | "
                       "not decided (1 of 3 seeds) |")
    assert len([r for r in rows if r.startswith("| ") and "R=2" in r]) == len(module.INITS) * len(module.r2_comparisons())
    assert all(r.endswith("| not decided (0 of 3 seeds) |") for r in rows[4:2 + 1 + 2 * 5])
